package sale

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/latency"
	"github.com/waitroom/waitroom/waitroom"
)

// Gateway is one more gateway in front of the same origin and queue store.
type Gateway struct {
	// Site is the guarded site; Admin the gateway's admin endpoint.
	Site, Admin string
}

// sites are every gateway's site, the first one first.
func (t Target) sites() []string {
	out := []string{t.Gateway}
	for _, g := range t.MoreGateways {
		out = append(out, g.Site)
	}
	return out
}

// admins are every gateway's admin endpoint, the first one first.
func (t Target) admins() []string {
	out := []string{t.GatewayAdmin}
	for _, g := range t.MoreGateways {
		out = append(out, g.Admin)
	}
	return out
}

// positionSet records the queue positions the gateways handed out, to
// catch one handed to two users (gateways sharing a store must never).
type positionSet struct {
	mu    sync.Mutex
	bits  []uint64
	count int64
	dups  int64
}

func (p *positionSet) seen(pos int64) {
	if pos <= 0 {
		return
	}
	w, b := pos/64, uint64(1)<<(pos%64)
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := int(w) + 1; n > len(p.bits) {
		p.bits = append(p.bits, make([]uint64, max(n, 2*len(p.bits))-len(p.bits))...)
	}
	if p.bits[w]&b != 0 {
		p.dups++
		return
	}
	p.bits[w] |= b
	p.count++
}

func (p *positionSet) read() (count, dups int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count, p.dups
}

// coherence is how long the gateways took to agree on the watermark: for
// each raise, from the moment the first gateway showed it until every
// other showed it too.
type coherence struct {
	lag latency.Recorder
	// polls is the admin reads made; misses those that failed.
	polls, misses int64
}

// coherencePoll is how often each gateway's watermark is read.
const coherencePoll = 50 * time.Millisecond

// watchCoherence reads every gateway's watermark (its own view, as its room
// last refreshed it from the store) until ctx ends. With one gateway there
// is nothing to compare.
func (s *sim) watchCoherence(ctx context.Context) {
	admins := s.target.admins()
	if len(admins) < 2 {
		return
	}
	clients := make([]api.GatewayAdmin, len(admins))
	for i, a := range admins {
		clients[i] = api.GatewayAdmin{Client: api.Client{HTTP: s.gwAdmin.HTTP, Base: a}}
	}
	// pending raises: the watermark first seen, when, and which gateways
	// have yet to show it.
	type raise struct {
		watermark int64
		first     time.Time
		behind    []bool
		left      int
	}
	var pending []*raise
	highest := int64(0)
	tick := time.NewTicker(coherencePoll)
	defer tick.Stop()
	marks := make([]int64, len(admins))
	ok := make([]bool, len(admins))
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// Every gateway is asked at once and the answers stamped with the
		// moment they were asked: a slow answer (the machine is busy) says
		// what the gateway knew then, and does not count as a lag.
		now := time.Now()
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				st, err := c.State(rctx, s.target.Event)
				marks[i], ok[i] = st.Watermark, err == nil
			}()
		}
		wg.Wait()
		s.mu.Lock()
		for i := range admins {
			s.coherence.polls++
			if !ok[i] {
				s.coherence.misses++
			}
		}
		s.mu.Unlock()
		for i := range admins {
			if ok[i] && marks[i] > highest {
				highest = marks[i]
				r := &raise{watermark: marks[i], first: now, behind: make([]bool, len(admins))}
				for j := range admins {
					if !ok[j] || marks[j] < r.watermark {
						r.behind[j] = true
						r.left++
					}
				}
				if r.left > 0 {
					pending = append(pending, r)
				} else {
					s.coherence.lag.Add(0)
				}
			}
		}
		kept := pending[:0]
		for _, r := range pending {
			for j := range admins {
				if r.behind[j] && ok[j] && marks[j] >= r.watermark {
					r.behind[j] = false
					r.left--
				}
			}
			if r.left == 0 {
				s.coherence.lag.Add(now.Sub(r.first))
				continue
			}
			kept = append(kept, r)
		}
		pending = kept
	}
}

// appliedCoherence is how long the gateways took to agree on the
// watermark by their own records of when they applied each value
// (GET …/applied): for every value a gateway applied, from the first
// gateway admitting by it (or a higher one) to the last. Unlike the polls
// above it does not depend on how fast the gateways answer or this load
// generator asks. unreached counts values some gateway never applied (nor
// passed) before the sale ended.
func appliedCoherence(records []api.Applied) (lag latency.Summary, unreached int64) {
	// reach[g] is gateway g's watermark each time it rose past its
	// highest so far: when g first admitted by at least that value.
	reach := make([][]waitroom.AppliedWatermark, len(records))
	// From below floor a gateway that forgot its oldest records cannot
	// tell when it got there.
	floor := int64(0)
	values := map[int64]bool{}
	for g, rec := range records {
		if rec.Dropped > 0 && len(rec.Applied) > 0 {
			floor = max(floor, rec.Applied[0].Watermark)
		}
		high := int64(0)
		for _, m := range rec.Applied {
			values[m.Watermark] = true
			if m.Watermark > high {
				high = m.Watermark
				reach[g] = append(reach[g], m)
			}
		}
	}
	var lags []time.Duration
	for w := range values {
		if w <= floor {
			continue
		}
		var first, last time.Time
		reachedAll := true
		for _, r := range reach {
			i, _ := slices.BinarySearchFunc(r, w, func(m waitroom.AppliedWatermark, w int64) int { return cmp.Compare(m.Watermark, w) })
			if i == len(r) {
				reachedAll = false
				break
			}
			if at := r[i].At; first.IsZero() || at.Before(first) {
				first = at
			}
			if at := r[i].At; at.After(last) {
				last = at
			}
		}
		if !reachedAll {
			unreached++
			continue
		}
		lags = append(lags, last.Sub(first))
	}
	return latency.Summarize(lags), unreached
}

// readApplied reads every gateway's record of the watermarks it applied.
func (s *sim) readApplied(ctx context.Context) ([]api.Applied, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out []api.Applied
	for _, a := range s.target.admins() {
		c := api.GatewayAdmin{Client: api.Client{HTTP: s.gwAdmin.HTTP, Base: a}}
		rec, err := c.Applied(ctx, s.target.Event)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}
