package main

// The floors of make bench-gateway: the waiting room's answers, asked of a
// Caddy of the run's own, and sent again by Caddy's own directives.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/freeport"
	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/stack"
	"github.com/waitroom/waitroom/waitroom"
)

// roomAnswer is an answer of the waiting room as it came: the header
// fields of its own (not Date and Server, which Caddy and net/http add to
// every answer, nor a Content-Length net/http declares itself) and the body.
type roomAnswer struct {
	header http.Header
	body   []byte
}

// roomAnswers are the answers the floors stand for.
type roomAnswers struct {
	arrival, json, html roomAnswer
	// passedOn is what an admitted request carries on to the upstream
	// besides the client's own header (the identity fields), and admitted
	// the fields the answer gets on its way back.
	passedOn, admitted http.Header
}

// askRoomAnswers asks a Caddy of their own, with one queue of event in
// memory and the run's secret, for a new arrival's answer, then the JSON
// answer and the page to the token it gave, as the measured requests ask.
func askRoomAnswers(ctx context.Context, client *http.Client, bin, dir, secret string, event int64) (roomAnswers, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return roomAnswers{}, err
	}
	port, err := freeport.Take()
	if err != nil {
		return roomAnswers{}, err
	}
	site := stack.Site{Port: port, Respond: upstreamBody, Waitroom: &stack.Waitroom{Event: event, Store: "memory", Watermark: 0}}
	up, seen, err := startRecordingUpstream()
	if err != nil {
		return roomAnswers{}, err
	}
	defer up.Close()
	admitPort, err := freeport.Take()
	if err != nil {
		return roomAnswers{}, err
	}
	admitting := stack.Site{Port: admitPort, Upstream: up.Addr().String(),
		Waitroom: &stack.Waitroom{Event: event + 1, Store: "memory", Watermark: 1 << 40}}
	caddy, err := stack.StartCaddy(ctx, stack.CaddyConfig{Bin: bin, Dir: dir, KeyID: "k1", Secret: secret, Sites: []stack.Site{site, admitting}})
	if err != nil {
		return roomAnswers{}, fmt.Errorf("the waiting room's answers: %w", err)
	}
	defer caddy.Stop(10 * time.Second)
	var a roomAnswers
	get := func(header map[string]string) (roomAnswer, error) {
		return ask(ctx, client, site.URL(), header, api.StatusWaiting)
	}
	if a.arrival, err = get(map[string]string{"Accept": "application/json"}); err != nil {
		return a, err
	}
	token := a.arrival.header.Get(api.HeaderToken)
	if a.json, err = get(map[string]string{"Accept": "application/json", api.HeaderToken: token}); err != nil {
		return a, err
	}
	// Accept-Encoding set by hand: the client hands the gzipped body over
	// as it came.
	a.html, err = get(map[string]string{"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "Accept-Encoding": "gzip, deflate, br",
		"Cookie": waitroom.CookieName(event) + "=" + token})
	if err != nil {
		return a, err
	}

	// Admitted as the measured requests are: with the token in the header.
	joined, err := ask(ctx, client, admitting.URL(), map[string]string{"Accept": "application/json"}, api.StatusAdmitted)
	if err != nil {
		return a, err
	}
	sent := map[string]string{"Accept": "application/json", api.HeaderToken: joined.header.Get(api.HeaderToken)}
	admitted, err := ask(ctx, client, admitting.URL(), sent, api.StatusAdmitted)
	if err != nil {
		return a, err
	}
	a.admitted = http.Header{}
	for name, values := range admitted.header {
		// The upstream's own fields come back through the plain proxy too.
		if !slices.Contains([]string{"Content-Type", "Content-Length", "Date", "Server"}, name) {
			a.admitted[name] = values
		}
	}
	a.passedOn = http.Header{}
	got := <-seen
	for name, values := range got {
		if _, ok := sent[name]; !ok && strings.HasPrefix(name, "X-Waitroom-") {
			a.passedOn[name] = values
		}
	}
	return a, nil
}

// ask sends one GET to base with header and returns the answer, which must
// be 200 with X-Waitroom-Status want.
func ask(ctx context.Context, client *http.Client, base string, header map[string]string, want string) (roomAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
	if err != nil {
		return roomAnswer{}, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return roomAnswer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return roomAnswer{}, err
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get(api.HeaderStatus) != want {
		return roomAnswer{}, fmt.Errorf("the waiting room's answers: status %d, X-Waitroom-Status %q, want %q", resp.StatusCode, resp.Header.Get(api.HeaderStatus), want)
	}
	h := resp.Header.Clone()
	h.Del("Date")
	h.Del("Server")
	if len(body) < autoLength {
		h.Del("Content-Length")
	}
	return roomAnswer{header: h, body: body}, nil
}

// startRecordingUpstream serves upstreamBody on a loopback port and hands
// over the header of each request it gets, as long as one is taken.
func startRecordingUpstream() (net.Listener, <-chan http.Header, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	seen := make(chan http.Header, 1)
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-seen:
			default:
			}
			seen <- r.Header.Clone()
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, upstreamBody)
		}))
	}()
	return ln, seen, nil
}

// autoLength is net/http's bufferBeforeChunkingSize: it declares the
// length of a smaller body the handler did not declare.
const autoLength = 2048

// floorSite sends a's bytes with Caddy's own header and respond
// directives: what the answer costs Caddy with nothing deciding it. A
// compressed body becomes text of the same length, since a Caddyfile holds
// text and wrk does not decode it.
func floorSite(port int, a roomAnswer) stack.Site {
	body := string(a.body)
	if a.header.Get("Content-Encoding") != "" {
		body = strings.Repeat("w", len(a.body))
	}
	return stack.Site{Port: port, Respond: body, Header: a.header}
}
