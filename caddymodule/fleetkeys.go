package caddymodule

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/waitroom/waitroom/waitroom"
)

// A fleet's gateways must hold the same secret under each key id. One that
// does not takes every other node's tokens for forgeries and queues their
// holders again at the back, and on its own it cannot tell that from a
// forgery. So each handler on Redis notes a check of its secrets
// (waitroom.KeyCheck, which tells secrets apart without telling them) in
// the store, as the origin does, and says so, in its log and a gauge,
// while the checks differ.

// fleetKeys notes the handler's key checks every waitroom.KeyNoteEvery.
type fleetKeys struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// startFleetKeys starts noting h's key checks in store, if the store is
// shared, until stop or the end of parent (the config's context).
func (h *Handler) startFleetKeys(parent context.Context, store waitroom.Store) *fleetKeys {
	noter, ok := store.(waitroom.KeyNoter)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithCancel(parent)
	f := &fleetKeys{cancel: cancel}
	f.done.Go(func() {
		t := time.NewTicker(waitroom.KeyNoteEvery)
		defer t.Stop()
		var last []waitroom.KeyDisagreement
		for {
			last = h.noteFleetKeys(ctx, noter, last)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return f
}

// noteFleetKeys notes h's checks once and tells what it found; last is
// what the previous call found.
func (h *Handler) noteFleetKeys(ctx context.Context, noter waitroom.KeyNoter, last []waitroom.KeyDisagreement) []waitroom.KeyDisagreement {
	d, err := noter.NoteKeys(ctx, h.Event, h.keyChecks, waitroom.KeyNoteWindow)
	if err != nil {
		// The store's trouble is told by the room; what the fleet holds is
		// unknown until the next try.
		h.logger.Debug("noting the gateway's key checks", zap.Error(err))
		return last
	}
	metrics.keyDisagreements.WithLabelValues(h.eventID).Set(float64(len(d)))
	for _, k := range d {
		h.logger.Error("the holders of this event's keys (its gateways, the origin) hold different secrets under one key id: "+
			"a gateway takes the others' tokens for forgeries and queues their holders again, the origin refuses them; "+
			"give every gateway and the origin's WAITROOM_KEYS the same secret under it",
			zap.String("key_id", k.KeyID), zap.String("this_gateway", h.keyChecks[k.KeyID]),
			zap.Strings("checks_in_the_fleet", k.Checks))
	}
	if len(d) == 0 && len(last) > 0 {
		h.logger.Info("the holders of this event's keys hold the same secrets again")
	}
	return d
}

func (f *fleetKeys) stop() {
	if f == nil {
		return
	}
	f.cancel()
	f.done.Wait()
}
