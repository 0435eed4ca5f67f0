package sale

import (
	"context"
	"time"
)

// pilotStats is what the autopilot did.
type pilotStats struct {
	Raises   int   `json:"raises"`
	Admitted int64 `json:"admitted_positions"`
	Restores int   `json:"restores"`
}

// autopilot raises the watermark through the gateway's admin API while
// seats remain and people wait: AdmitFactor users per seat left, at most
// once per PilotEvery, as event staff would. If the queue state was lost
// (its Redis restarted), it puts the watermark back where it had it.
func (s *sim) autopilot(ctx context.Context) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var last time.Time
	var want int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		st, err := s.gatewayState(ctx)
		if err != nil {
			continue
		}
		if st.Watermark < want {
			if _, err := s.gwAdmin.SetWatermark(ctx, s.target.Event, want); err == nil {
				s.mu.Lock()
				s.pilot.Restores++
				s.mu.Unlock()
			}
			continue
		}
		if st.Waiting() == 0 || time.Since(last) < s.cfg.PilotEvery {
			continue
		}
		ev, err := s.admin.Event(ctx, s.target.Event)
		if err != nil || ev.Remaining <= 0 {
			continue
		}
		by := s.cfg.AdmitFactor * ev.Remaining
		st, err = s.gwAdmin.Raise(ctx, s.target.Event, by)
		if err != nil {
			continue
		}
		last = time.Now()
		want = st.Watermark
		s.mu.Lock()
		s.pilot.Raises++
		s.pilot.Admitted += by
		s.mu.Unlock()
	}
}
