// Package admission is the Go recipe for a backend behind the waiting room:
// net/http middleware that serves a request only when it carries, in
// X-Waitroom-Token, a queue token the gateway issued for the event, checked
// with the same waitroom package the gateway signs it with.
//
//	keys, err := waitroom.ParseKeys(os.Getenv("WAITROOM_KEYS"))
//	if err != nil {
//		log.Fatalf("WAITROOM_KEYS: %v", err)
//	}
//	ks, err := waitroom.NewKeySet(nil, keys...)
//	if err != nil {
//		log.Fatalf("WAITROOM_KEYS: %v", err)
//	}
//	http.Handle("/checkout/", admission.Middleware(ks, 42, checkout))
//
// A request without a token, or with one the gateway would not take (another
// event, expired, forged, a pre-queue token), is answered 403 not_admitted.
// The token proves who the bearer is and that the gateway gave it its place,
// not that its turn came: a waiting visitor holds one too. Whether the
// position is admitted (the watermark, the admission window, a revocation)
// is in the gateway's store; see docs/gateway.md, Checking admission in your
// backend.
package admission

import (
	"context"
	"net/http"

	"github.com/waitroom/waitroom/waitroom"
)

// Header is the request header the gateway passes the verified token in.
const Header = "X-Waitroom-Token"

type ticketKey struct{}

// Middleware passes on to next only the requests whose X-Waitroom-Token is
// a queue token for event that keys verify (Verify: HS256 by kid, iss, iat,
// exp within the leeway, a position, never a pre-queue token). next finds
// the bearer with FromContext.
func Middleware(keys *waitroom.KeySet, event int64, next http.Handler) http.Handler {
	if keys == nil {
		panic("admission: Middleware needs a key set (waitroom.NewKeySet)")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, err := keys.Verify(r.Header.Get(Header), event)
		if err != nil {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"error":"not_admitted","message":"this page is reached through the waiting room"}`))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ticketKey{}, t)))
	})
}

// FromContext is the admitted bearer: its subject (account or visitor) and
// queue position.
func FromContext(ctx context.Context) (waitroom.Ticket, bool) {
	t, ok := ctx.Value(ticketKey{}).(waitroom.Ticket)
	return t, ok
}
