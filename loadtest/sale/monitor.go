package sale

import (
	"context"
	"time"

	"github.com/waitroom/waitroom/loadtest/api"
)

// Sample is the sale at one instant, for the chart.
type Sample struct {
	T time.Duration `json:"t_ns"`
	// Queue is positions handed out and not admitted; Admitted the
	// watermark (capped at the last position handed out).
	Queue    int64 `json:"queue"`
	Admitted int64 `json:"admitted"`
	// Holds is seats held and not yet paid; Sold seats confirmed;
	// Remaining seats left to sell (Redis).
	Holds     int64 `json:"holds"`
	Sold      int64 `json:"sold"`
	Remaining int64 `json:"remaining"`
	// Requests is the requests sent to the gateway so far, Reached those
	// it passed to the origin.
	Requests int64 `json:"requests"`
	Reached  int64 `json:"reached"`
}

// monitor samples the gateway and the origin a few times a second, tells
// progress, and notices when the sale can no longer change.
func (s *sim) monitor(ctx context.Context, progress Progress) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var prev Sample
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		smp := prev
		smp.T = time.Since(s.start)
		smp.Requests = s.c.gateway.Load()
		smp.Reached = s.c.reached.Load()
		// Both sides are read at once, so a slow answer from one (the
		// system is saturated, or a server paused) costs one sample, not two.
		var st api.GatewayState
		var stErr error
		done := make(chan struct{})
		go func() {
			st, stErr = s.gatewayState(ctx)
			close(done)
		}()
		inv, err := s.invariant(ctx)
		<-done
		if stErr == nil {
			smp.Queue = st.Waiting()
			smp.Admitted = min(st.Watermark, st.LastPosition)
		}
		if err == nil {
			smp.Holds = inv.Pending
			smp.Sold = inv.Confirmed
			smp.Remaining = inv.Remaining
			arrived := smp.T > s.cfg.Window
			if arrived && inv.Remaining == 0 && inv.Pending == 0 && s.c.inPayment.Load() == 0 {
				s.closed.Store(true)
			}
		}
		prev = smp
		s.mu.Lock()
		s.timeline = append(s.timeline, smp)
		s.mu.Unlock()
		if progress != nil {
			progress(s.c.finished.Load(), int64(s.cfg.Users), smp)
		}
	}
}
