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
// forgery. So each handler on Redis notes a check of its secrets (the edge's
// KeyCheck, which tells secrets apart without telling them) in the store,
// and says so, in its log and a gauge, while the fleet's checks differ.

const (
	fleetKeysEvery = 30 * time.Second
	// fleetKeysWindow is how long a check counts after a node last noted
	// it: a secret corrected, or a node gone, stops counting after it.
	fleetKeysWindow = 3 * fleetKeysEvery
)

// keyNoter is a store shared by a fleet (the Redis store).
type keyNoter interface {
	NoteKeys(ctx context.Context, event int64, checks map[string]string, window time.Duration) ([]waitroom.KeyDisagreement, error)
}

// fleetKeys notes the handler's key checks every fleetKeysEvery.
type fleetKeys struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// startFleetKeys starts noting h's key checks in store, if the store is
// shared, until stop or the end of parent (the config's context).
func (h *Handler) startFleetKeys(parent context.Context, store waitroom.Store) *fleetKeys {
	noter, ok := store.(keyNoter)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithCancel(parent)
	f := &fleetKeys{cancel: cancel}
	f.done.Go(func() {
		t := time.NewTicker(fleetKeysEvery)
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
func (h *Handler) noteFleetKeys(ctx context.Context, noter keyNoter, last []waitroom.KeyDisagreement) []waitroom.KeyDisagreement {
	d, err := noter.NoteKeys(ctx, h.Event, h.keyChecks, fleetKeysWindow)
	if err != nil {
		// The store's trouble is told by the room; what the fleet holds is
		// unknown until the next try.
		h.logger.Debug("noting the gateway's key checks", zap.Error(err))
		return last
	}
	metrics.keyDisagreements.WithLabelValues(h.eventID).Set(float64(len(d)))
	for _, k := range d {
		h.logger.Error("the gateways of this event hold different secrets under one key id: "+
			"each takes the others' tokens for forgeries and queues their holders again; "+
			"give every gateway the same secret under it",
			zap.String("key_id", k.KeyID), zap.String("this_gateway", h.keyChecks[k.KeyID]),
			zap.Strings("checks_in_the_fleet", k.Checks))
	}
	if len(d) == 0 && len(last) > 0 {
		h.logger.Info("the gateways of this event hold the same secrets again")
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
