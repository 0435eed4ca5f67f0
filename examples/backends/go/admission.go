// Package admission is the Go recipe for a backend behind the waiting room:
// net/http middleware that serves a request only when the gateway admitted
// it, by checking the queue token the gateway passes on in X-Waitroom-Token
// with the same waitroom package the gateway signs it with.
//
//	keys, _ := waitroom.ParseKeys(os.Getenv("WAITROOM_KEYS"))
//	ks, _ := waitroom.NewKeySet(nil, keys...)
//	http.Handle("/checkout/", admission.Middleware(ks, 42, checkout))
//
// A request without a token, or with one the gateway would not admit (another
// event, expired, forged, a pre-queue token), is answered 403 not_admitted.
// What the gateway's watermark says is the gateway's to judge: the token
// proves the bearer came through it.
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
