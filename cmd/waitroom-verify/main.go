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
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

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
	if err := verify(in, stdout, *id, *commitment); err != nil {
		fmt.Fprintln(stderr, "waitroom-verify:", err)
		return 1
	}
	return 0
}

// errNotDrawn is returned for the answer of the lottery route before the
// draw: it holds the commitment only.
var errNotDrawn = errors.New("no seed: the draw has not been made yet (only the commitment is published)")

func verify(in io.Reader, out io.Writer, id, commitment string) error {
	var p lottery.Published
	if err := json.NewDecoder(in).Decode(&p); err != nil {
		return fmt.Errorf("reading the lottery: %w", err)
	}
	if p.Seed == "" {
		return errNotDrawn
	}
	if commitment != "" && commitment != p.Commitment {
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
