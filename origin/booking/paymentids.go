package booking

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/hashtag"
	"github.com/waitroom/waitroom/origin/ledger"
)

// paymentIDs keeps, in Redis, which payment a booking's charge made while
// the booking waits for that payment, instead of a ledger write of its own:
// the write that settles the booking (its confirmation, its failure, its
// refund) records the payment id in the ledger. Meanwhile a provider's
// event about the payment finds its booking here, a webhook's metadata
// naming the booking is checked here without asking the provider, and a
// GET shows the id.
//
// Redis losing a record costs a provider call, never a sale or money: a
// webhook then finds the booking by its metadata and asks the provider
// which payment is the booking's (ownPayment), and the payment
// reconciliation asks it about a booking that waits too long.
type paymentIDs struct {
	rdb redis.UniversalClient
	// provider names the payments' provider; payment ids are its own.
	provider string
	// keep outlasts the provider's retries of its webhooks.
	keep time.Duration
}

// ofBookingKey is b's record, on its event's slot; ofPaymentKey a
// payment's, named by the payment alone (its events may not name the
// booking).
func ofBookingKey(b ledger.Booking) string { return hashtag.Event(b.EventID) + ":payment:" + b.ID }
func (p paymentIDs) ofPaymentKey(id string) string {
	return "payment:" + p.provider + ":" + id
}

// Keep records payment id as b's.
func (p paymentIDs) Keep(ctx context.Context, b ledger.Booking, id string) error {
	_, err := p.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, ofBookingKey(b), id, p.keep)
		pipe.Set(ctx, p.ofPaymentKey(id), b.ID, p.keep)
		return nil
	})
	if err != nil {
		return fmt.Errorf("keep payment of booking %s: %w", b.ID, err)
	}
	return nil
}

// Of is b's payment id as recorded, "" when none is.
func (p paymentIDs) Of(ctx context.Context, b ledger.Booking) (string, error) {
	return p.get(ctx, ofBookingKey(b))
}

// BookingOf is the id of the booking payment id was made for, "" when
// none is recorded.
func (p paymentIDs) BookingOf(ctx context.Context, id string) (string, error) {
	return p.get(ctx, p.ofPaymentKey(id))
}

func (p paymentIDs) get(ctx context.Context, key string) (string, error) {
	v, err := p.rdb.Get(ctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("payment record %s: %w", key, err)
	}
	return v, nil
}
