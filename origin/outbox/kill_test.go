package outbox_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// lockedBuffer is an origin's log, written by its process while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestKilledOriginLosesNoEvent builds the origin, lets it send the events
// of a sale to a site, kills it (SIGKILL) while requests are in flight, and
// starts another: every event of the outbox reaches the site at least once,
// counted by event id, in order per booking, and none is left.
func TestKilledOriginLosesNoEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the origin")
	}
	dbURL := testenv.Postgres(t)
	redisURL := testenv.RedisURL(t)
	bin := filepath.Join(t.TempDir(), "origin")
	build := exec.Command("go", "build", "-o", bin, "github.com/waitroom/waitroom/cmd/origin")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	const bookings = 150
	s := newSaleAt(t, dbURL, time.Now().UTC().Truncate(time.Second))
	var ids []string
	for range bookings {
		id := s.confirm()
		s.cancel(id)
		ids = append(ids, id)
	}
	ctx := context.Background()
	backlog, err := s.l.OutboxBacklog(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3*bookings, backlog.Pending)

	// The site takes the first third, then holds every answer back (each
	// request received and recorded, its acknowledgement never sent) until
	// the origin is killed.
	rcv := newReceiver(t, time.Now)
	held := make(chan struct{})
	reached := make(chan struct{})
	inFlight := make(chan struct{}, 3*bookings)
	rcv.setAnswer(func(n int, _ received) int {
		switch {
		case n == bookings:
			rcv.hold = held
			close(reached)
		case n > bookings:
			inFlight <- struct{}{}
		}
		return http.StatusOK
	})

	start := func(name string) (*exec.Cmd, *lockedBuffer) {
		var log lockedBuffer
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(),
			"DATABASE_URL="+dbURL, "REDIS_URL="+redisURL,
			"WAITROOM_KEYS=k1:"+strings.Repeat("k", 32), "ORIGIN_ADMIN_TOKEN=admin",
			"ORIGIN_ADDR=127.0.0.1:0", "ORIGIN_METRICS_ADDR=127.0.0.1:0",
			"ORIGIN_EVENTS_URL="+rcv.srv.URL, "ORIGIN_EVENTS_SECRET="+string(secret),
			// A short try, so the killed node's leases (twice as long) end soon.
			"ORIGIN_EVENTS_TIMEOUT=1s")
		cmd.Stdout, cmd.Stderr = &log, &log
		require.NoError(t, cmd.Start(), name)
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("%s log:\n%s", name, log.String())
			}
		})
		return cmd, &log
	}

	first, _ := start("first origin")
	<-reached
	<-inFlight // at least one request is in flight, its answer held back
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	_ = first.Wait()
	close(held)
	killedAt := len(rcv.events())
	t.Logf("killed with %d of %d events received (the last ones never acknowledged) in %d requests", killedAt, 3*bookings, rcv.requests())

	start("second origin")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, err := s.l.OutboxBacklog(ctx)
		require.NoError(t, err)
		if b.Pending == 0 && b.Dead == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the outbox still holds %+v", b)
		time.Sleep(50 * time.Millisecond)
	}

	// Counted: every booking's three events, each received at least once.
	got := rcv.events()
	assert.Len(t, got, 3*bookings, "distinct events received")
	byBooking := map[string][]string{}
	for _, ev := range got {
		byBooking[ev.Data.Booking] = append(byBooking[ev.Data.Booking], ev.Type)
	}
	for _, id := range ids {
		assert.Equal(t, []string{"booking.confirmed", "booking.cancelled", "ticket.voided"}, byBooking[id], "booking %s", id)
	}
	dups := 0
	for _, n := range rcv.seenCounts() {
		dups += n - 1
	}
	t.Logf("%d events received twice or more (their acknowledgement was lost with the killed origin)", dups)
	assert.Positive(t, dups, "the requests in flight at the kill were sent again")
	assert.Zero(t, rcv.badSigs)
}
