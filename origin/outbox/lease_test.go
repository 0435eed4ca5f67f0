package outbox_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin/outbox"
)

// TestSlowSiteNoTryOutlivesItsLease: a site that acknowledges slowly makes
// a pass's last events wait their turn. One whose turn comes too late to
// end within its lease is not sent by that node: another node, free to
// take it once the lease ends, would send it too.
func TestSlowSiteNoTryOutlivesItsLease(t *testing.T) {
	s := newSale(t, testenv.Postgres(t))
	clock := testenv.NewClock(saleStart)
	for range 3 {
		s.confirm()
	}
	// The site takes each request, tells the test, and answers 200 when
	// the test says: the test moves the clock meanwhile.
	type arrival struct {
		id      string
		release chan struct{}
	}
	arrived := make(chan arrival, 10)
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := outbox.Verify(r.Header.Get(outbox.SignatureHeader), body, secret, clock.Now(), outbox.DefaultTolerance); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var ev received
		_ = json.Unmarshal(body, &ev)
		mu.Lock()
		seen[ev.ID]++
		mu.Unlock()
		a := arrival{id: ev.ID, release: make(chan struct{})}
		arrived <- a
		<-a.release
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	// A try takes at most 2 s and a lease lasts 4 s; one request at a time.
	tune := func(c *outbox.Config) { c.Concurrency = 1 }
	nodeA, _ := newDeliverer(t, s.l, srv.URL, clock, tune)
	nodeB, _ := newDeliverer(t, s.l, srv.URL, clock, tune)

	passA := make(chan outbox.Pass, 1)
	go func() {
		p, err := nodeA.RunOnce(context.Background())
		assert.NoError(t, err)
		passA <- p
	}()
	// Two slow answers, 1.5 s each: at 3 s, a third try could end after
	// the lease (4 s).
	for range 2 {
		a := <-arrived
		clock.Advance(1500 * time.Millisecond)
		close(a.release)
	}
	var late []arrival
	var p outbox.Pass
	select {
	case p = <-passA:
	case a := <-arrived:
		// Node A sent it anyway; its lease ends while the site takes its
		// time, and node B takes it.
		late = append(late, a)
	}
	clock.Advance(1500 * time.Millisecond)
	passB := make(chan outbox.Pass, 1)
	go func() {
		p, err := nodeB.RunOnce(context.Background())
		assert.NoError(t, err)
		passB <- p
	}()
	late = append(late, <-arrived)
	for _, a := range late {
		close(a.release)
	}
	if len(late) > 1 {
		p = <-passA
	}
	<-passB
	assert.Equal(t, outbox.Pass{Taken: 3, Delivered: 2, Left: 1}, p)

	b, err := s.l.OutboxBacklog(context.Background())
	require.NoError(t, err)
	assert.Zero(t, b.Pending)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 3)
	for id, n := range seen {
		assert.Equal(t, 1, n, "event %s sent %d times", id, n)
	}
}
