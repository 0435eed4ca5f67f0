package origin

import (
	"context"
	"strconv"

	"github.com/waitroom/waitroom/waitroom"
)

// noteKeys notes the origin's key checks (waitroom.KeyCheck) for every
// served event in the gateways' store, beside the gateways' own, and says
// so, in its log and a gauge, while they differ. An origin whose secret
// under a key id is not the gateways' refuses every buyer they admit with
// 401 invalid_token, and on its own it cannot tell their tokens from
// forgeries.
func (p *publisher) noteKeys(ctx context.Context) {
	checks := p.s.cfg.Keys.Checks()
	for _, ev := range p.s.seats.Registry().Events() {
		noter, ok := ev.Room().Store().(waitroom.KeyNoter)
		if !ok {
			continue
		}
		d, err := noter.NoteKeys(ctx, ev.ID, checks, waitroom.KeyNoteWindow)
		if err != nil {
			// Redis's trouble is told by the requests; what the fleet holds
			// is unknown until the next try.
			p.s.log.Debug("key checks not noted", "event", ev.ID, "error", err)
			continue
		}
		p.s.metrics.keyDisagreements.WithLabelValues(strconv.FormatInt(ev.ID, 10)).Set(float64(len(d)))
		for _, k := range d {
			p.s.log.Error("the origin and the gateways of an event hold different secrets under one key id: "+
				"whoever holds another secret than the token's signer refuses its tokens as forged; "+
				"give WAITROOM_KEYS and every gateway's key the same secret under it",
				"event", ev.ID, "key_id", k.KeyID, "origin", checks[k.KeyID], "checks", k.Checks)
		}
	}
}
