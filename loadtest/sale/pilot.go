package sale

import (
	"context"
	"slices"
	"time"
)

// pilotStats is what the autopilot did.
type pilotStats struct {
	Raises   int   `json:"raises"`
	Admitted int64 `json:"admitted_positions"`
	Restores int   `json:"restores"`
}

// autopilot raises the watermark through the gateway's admin API while
// seats remain and people wait: the next AdmitFactor users still waiting
// per seat left, as event staff would. It raises again only once the users it admitted have had
// their turn (nearly all of those still queued at or below the watermark
// have come in), or PilotSettle after the last raise, and never more often
// than PilotEvery: seats that only look free because the admitted have not
// reached them yet are not given out twice over. If the queue state was
// lost (its Redis restarted), it puts the watermark back where it had it.
func (s *sim) autopilot(ctx context.Context) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var last time.Time
	var want, batch int64
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
		if time.Since(last) < s.cfg.PilotSettle && s.outstanding(st.Watermark) > max(10, batch/20) {
			continue
		}
		ev, err := s.admin.Event(ctx, s.target.Event)
		if err != nil || ev.Remaining <= 0 {
			continue
		}
		by := s.raiseFor(st.Watermark, s.cfg.AdmitFactor*ev.Remaining)
		st, err = s.gwAdmin.Raise(ctx, s.target.Event, by)
		if err != nil {
			continue
		}
		last = time.Now()
		want, batch = st.Watermark, s.cfg.AdmitFactor*ev.Remaining
		s.mu.Lock()
		s.pilot.Raises++
		s.pilot.Admitted += by
		s.mu.Unlock()
	}
}

// outstanding counts the users still queued whose position is admitted:
// they will come in at their next poll.
func (s *sim) outstanding(watermark int64) int64 {
	var n int64
	for i := range s.users {
		u := &s.users[i]
		if p := u.position.Load(); p > 0 && p <= watermark && u.waiting.Load() {
			n++
		}
	}
	return n
}

// raiseFor is how far to raise the watermark to admit the next n visitors
// still in the queue. Positions whose holders left (told sold out earlier)
// are passed over, so a late handful of seats reaches people still
// waiting instead of stalling behind the departed; with fewer than n known
// to wait (early on, most have not joined yet) it admits n positions, so
// the next arrivals come straight in.
func (s *sim) raiseFor(watermark, n int64) int64 {
	var ahead []int64
	for i := range s.users {
		u := &s.users[i]
		if p := u.position.Load(); p > watermark && u.waiting.Load() {
			ahead = append(ahead, p)
		}
	}
	if int64(len(ahead)) < n {
		by := n
		for _, p := range ahead {
			by = max(by, p-watermark)
		}
		return by
	}
	slices.Sort(ahead)
	return ahead[n-1] - watermark
}
