package origin

import (
	"context"
	"crypto/rand"
	"net/http"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/seats"
	"github.com/waitroom/waitroom/origin/storefront"
	"github.com/waitroom/waitroom/waitroom"
)

// newStorefront builds the buyer's pages over the server's own protocol,
// bookings and checks: the pages judge a buyer as the API does.
func (s *Server) newStorefront() (*storefront.Store, error) {
	key := s.cfg.BuyerKey
	if len(key) == 0 {
		key = make([]byte, storefront.MinBuyerKeyLen)
		_, _ = rand.Read(key)
	}
	provider := ""
	if s.cfg.Payments != nil {
		provider = s.cfg.Payments.Name()
	}
	return storefront.New(storefront.Config{
		Seats: s.seats, Ledger: s.ledger, Idempotency: s.idem, Bookings: s.bookings, Provider: provider,
		Ticket: func(r *http.Request, event int64) (waitroom.Ticket, bool) {
			t, bad := s.gate.ticket(r, event)
			return t, bad == nil
		},
		Admitted: s.gate.admitted,
		HeldSeats: func(ctx context.Context, ev *seats.Event, remaining int64) (int64, error) {
			_, held, err := s.publisher.held(ctx, ev, remaining)
			return held, err
		},
		Paused:     pausedOnly,
		RenderHold: func(h ledger.Hold, e ledger.Event) []byte { return holdBodyAt(h, e, h.CreatedAt) },
		Confirmed:  revokeWhenConfirmed,
		BuyerKey:   key,
		Clock:      s.cfg.Clock,
		Logger:     s.log,
	})
}
