// Command waitroom-verify recomputes a scheduled opening's draw from what the
// gateway published, so anyone can check that every position follows from
// the seed committed to before the opening and the list of entrants.
//
//	curl -s localhost:2019/waitroom/events/42/lottery > lottery.json
//	waitroom-verify lottery.json              # every entrant: id, position
//	waitroom-verify -id v_abc… lottery.json   # one entrant's position
//	waitroom-verify < lottery.json            # the same, from stdin
//
// It checks that SHA-256 of the seed is the published commitment (compare
// that with the commitment you saw before the opening) and that the draw
// was made with the algorithm it implements, then prints "<id>\t<position>"
// lines in position order. It exits 1 when a check fails or the id is not
// an entrant, 2 on bad usage. See docs/opening.md.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/waitroom/waitroom/waitroom/lottery"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("waitroom-verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	id := fs.String("id", "", "print only this entrant's position")
	commitment := fs.String("commitment", "", "the commitment seen before the opening, to compare with the published one")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: waitroom-verify [-id <entrant>] [-commitment <hex>] [lottery.json]   (stdin without a file)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return 2
	}
	want, err := parseCommitment(*commitment)
	if err != nil {
		fmt.Fprintln(stderr, "waitroom-verify:", err)
		return 2
	}
	in := stdin
	if fs.NArg() == 1 && fs.Arg(0) != "-" {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			fmt.Fprintln(stderr, "waitroom-verify:", err)
			return 2
		}
		defer f.Close()
		in = f
	}
	if err := verify(in, stdout, *id, want); err != nil {
		fmt.Fprintln(stderr, "waitroom-verify:", err)
		return 1
	}
	return 0
}

// parseCommitment reads the commitment the user saved, in lower case; ""
// when none was given. One that cannot be a SHA-256 is refused as usage:
// compared as it is, a slip in copying it would read as a draw whose
// commitment changed.
func parseCommitment(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return "", nil
	}
	if b, err := hex.DecodeString(s); err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("-commitment: want the 64 hex digits of a SHA-256, got %q", s)
	}
	return s, nil
}

// document is what the lottery route may answer: a draw, the commitment
// alone before it, or an error ({"error", "message"}; Caddy's own admin
// errors have no message), which is what a file saved from a wrong event
// or route holds.
type document struct {
	lottery.Published
	Error   string `json:"error"`
	Message string `json:"message"`
}

// errNotDrawn is returned for the answer of the lottery route before the
// draw: it holds the commitment only.
var errNotDrawn = errors.New("no seed: the draw has not been made yet (only the commitment is published)")

func verify(in io.Reader, out io.Writer, id, commitment string) error {
	var d document
	dec := json.NewDecoder(in)
	if err := dec.Decode(&d); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("reading the lottery: the input is empty")
		}
		return fmt.Errorf("reading the lottery: %w", err)
	}
	// Two answers saved into one file are not one draw.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("reading the lottery: data after the draw")
	}
	p := d.Published
	switch {
	case d.Error != "" && d.Message != "":
		return fmt.Errorf("not a draw but an error answer: %s: %s", d.Error, d.Message)
	case d.Error != "":
		return fmt.Errorf("not a draw but an error answer: %s", d.Error)
	case p.Commitment == "":
		return errors.New("not a draw: it has no commitment")
	case p.Seed == "":
		return errNotDrawn
	case p.Entrants == nil:
		// The route publishes [] for a draw of nobody: a file without
		// the list would otherwise pass as one.
		return errors.New("not a draw: it has no list of entrants")
	case p.Base < 0:
		return fmt.Errorf("base %d is negative: positions start at 1", p.Base)
	}
	if commitment != "" && commitment != strings.ToLower(p.Commitment) {
		return fmt.Errorf("the published commitment %s is not the one given, %s", p.Commitment, commitment)
	}
	order, err := lottery.Check(p)
	if err != nil {
		return err
	}
	for x, entrant := range order {
		pos := p.Base + int64(x) + 1
		if id == "" {
			fmt.Fprintf(out, "%s\t%d\n", entrant, pos)
		} else if entrant == id {
			fmt.Fprintf(out, "%s\t%d\n", entrant, pos)
			return nil
		}
	}
	if id != "" {
		return fmt.Errorf("%q is not among the %d entrants", id, len(order))
	}
	return nil
}
