package caddymodule

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/waitroom"
)

// after_purchase (docs/api.md §3): a visitor whose token the site revoked,
// or whose account's position is completed, is passed on to the buyer's
// pages after the purchase, its cookie kept, and to nothing else.

var buyerPages = []string{"/bookings/*", "/tickets", "/v1/tickets/*"}

// at is a request for path with token as the queue cookie.
func at(h *Handler, path, token string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://tickets.test"+path, nil)
	r.Header.Set("Accept", "application/json")
	if token != "" {
		r.AddCookie(&http.Cookie{Name: h.cookieName, Value: token})
	}
	return r
}

// passedCompleted checks that res passed the request on as a completed
// visitor's: user, the status said to the site and the client, and the
// token it came with neither replaced nor renewed.
func passedCompleted(t *testing.T, h *Handler, res result, user string, pos int64) {
	t.Helper()
	require.NotNil(t, res.next, "passed on: %s %s", res.status(), res.rec.Body.String())
	assert.Equal(t, StatusCompleted, res.status())
	assert.Equal(t, StatusCompleted, res.next.Header.Get(HeaderStatus), "the site is told too")
	assert.Equal(t, user, res.next.Header.Get(HeaderUser))
	assert.Equal(t, strconv.FormatInt(pos, 10), res.next.Header.Get(HeaderPosition))
	assert.Nil(t, res.cookie(t, h.cookieName), "the cookie is kept, not replaced")
	assert.Empty(t, res.rec.Header().Get(HeaderToken), "no token given")
	assert.Empty(t, res.rec.Header().Values(HeaderCommand), "the site's command stays with the gateway")
	got, _ := res.repl.GetString("http.waitroom.status")
	assert.Equal(t, StatusCompleted, got)
}

// notPassed checks that res did not reach the site.
func notPassed(t *testing.T, res result, what string) {
	t.Helper()
	assert.Nil(t, res.next, "%s: passed on: %s", what, res.status())
}

// TestAfterPurchaseRevokedVisitor: an anonymous visitor whose token the
// site revoked reaches the buyer's pages with its identity, and nothing
// else: elsewhere it is a new arrival as before.
func TestAfterPurchaseRevokedVisitor(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.AfterPurchase = buyerPages
		provision(t, h)
		setWatermark(t, h, 1)
		res := do(t, h, at(h, "/buy", ""))
		tok, pos := placedToken(t, h, res)
		require.Equal(t, pos, admittedAt(res))
		user := res.next.Header.Get(HeaderUser)
		require.NotEmpty(t, user)
		serveRevoking(t, h, at(h, "/holds/1/booking", tok))

		for _, path := range []string{"/bookings/0b6f", "/tickets", "/v1/tickets/T1.png", "/BOOKINGS/0b6f", "/tickets?lang=de"} {
			// The site may say revoke again (a confirmed booking's page
			// does): nothing more to end, and never the client's to see.
			res = doAs(t, h, at(h, path, tok), true)
			passedCompleted(t, h, res, user, pos)
			if res.next != nil {
				assert.Equal(t, tok, res.next.Header.Get(HeaderToken), "%s: the site can read its own token", path)
			}
		}
		// By header too (API clients).
		r := withToken(h, tok)
		r.URL.Path = "/bookings/0b6f"
		passedCompleted(t, h, do(t, h, r), user, pos)

		for _, path := range []string{"/buy", "/bookings", "/bookings/../events/1/holds", "/tickets/x", "/v1/bookings/0b6f"} {
			res = do(t, h, at(h, path, tok))
			notPassed(t, res, path)
			_, again := placedToken(t, h, res)
			assert.Greater(t, again, pos, "%s: a new arrival at the back, as before", path)
			assert.Equal(t, StatusWaiting, res.status(), path)
		}
	})
}

// TestAfterPurchaseAccount: an account whose admission the site revoked
// reaches the buyer's pages, with its token and from a new device, and is
// told it is done everywhere else.
func TestAfterPurchaseAccount(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.AfterPurchase = buyerPages
		h.UserID = "{http.request.header.X-User-ID}"
		provision(t, h)
		setWatermark(t, h, 1)
		res := do(t, h, asUser(at(h, "/buy", ""), "alice"))
		tok, pos := placedToken(t, h, res)
		require.Equal(t, pos, admittedAt(res))
		serveRevoking(t, h, asUser(at(h, "/buy", tok), "alice"))

		res = do(t, h, asUser(at(h, "/tickets", tok), "alice"))
		passedCompleted(t, h, res, "alice", pos)
		res = do(t, h, asUser(at(h, "/tickets", ""), "alice"))
		passedCompleted(t, h, res, "alice", pos)
		if res.next != nil {
			assert.Empty(t, res.next.Header.Get(HeaderToken), "a new device has no token to pass on")
		}

		// Past its window, while its revocation lasts: its position is
		// completed still.
		clk.Advance(DefaultAdmissionWindow + time.Minute)
		refresh(t, h)
		passedCompleted(t, h, do(t, h, asUser(at(h, "/bookings/1", tok), "alice")), "alice", pos)
		passedCompleted(t, h, do(t, h, asUser(at(h, "/bookings/1", ""), "alice")), "alice", pos)

		for _, tk := range []string{tok, ""} {
			res = do(t, h, asUser(at(h, "/buy", tk), "alice"))
			notPassed(t, res, "/buy")
			assert.Equal(t, StatusCompleted, res.status(), "elsewhere it is done, as before")
		}

		// The purchase sold the event out: the account is done still, and
		// reaches its bookings, from any device.
		update(t, h, waitroom.Change{SoldOut: ptr(true)})
		for _, tk := range []string{tok, ""} {
			res = do(t, h, asUser(at(h, "/buy", tk), "alice"))
			notPassed(t, res, "/buy")
			assert.Equal(t, StatusCompleted, res.status(), "sold out, token %q: %s", tk, res.rec.Body.String())
			assert.Equal(t, http.StatusOK, res.rec.Code)
			assert.Equal(t, "no-store", res.rec.Header().Get("Cache-Control"))
			passedCompleted(t, h, do(t, h, asUser(at(h, "/tickets", tk), "alice")), "alice", pos)
		}
		res = do(t, h, asUser(at(h, "/buy", ""), "bob"))
		assert.Equal(t, http.StatusGone, res.rec.Code, "another account is told it is sold out")
	})
}

// TestAfterPurchaseNotForOthers: the buyer's pages pass nobody but the
// completed: a waiting visitor waits there, an admitted one is admitted,
// and one whose admission window ended unrevoked is a new arrival.
func TestAfterPurchaseNotForOthers(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.AfterPurchase = buyerPages
		provision(t, h)

		res := do(t, h, at(h, "/bookings/1", ""))
		notPassed(t, res, "a stranger")
		assert.Equal(t, StatusWaiting, res.status())
		waiting, _ := placedToken(t, h, res)
		res = do(t, h, at(h, "/bookings/1", waiting))
		notPassed(t, res, "a waiting visitor")
		assert.Equal(t, StatusWaiting, res.status())

		setWatermark(t, h, 1)
		res = do(t, h, at(h, "/bookings/1", waiting))
		assert.Equal(t, int64(1), admittedAt(res), "an admitted visitor is admitted: %s", res.status())

		clk.Advance(DefaultAdmissionWindow + time.Second)
		refresh(t, h)
		res = do(t, h, at(h, "/bookings/1", waiting))
		notPassed(t, res, "past its window")
		_, pos := placedToken(t, h, res)
		assert.Equal(t, int64(2), pos, "a new arrival at the back")
	})
}

// TestAfterPurchaseNotConfigured: without after_purchase a revoked visitor
// reaches nothing, the buyer's pages included.
func TestAfterPurchaseNotConfigured(t *testing.T) {
	h := provision(t, &Handler{})
	setWatermark(t, h, 1)
	res := do(t, h, at(h, "/buy", ""))
	tok, _ := placedToken(t, h, res)
	serveRevoking(t, h, at(h, "/buy", tok))
	res = do(t, h, at(h, "/bookings/1", tok))
	notPassed(t, res, "no after_purchase")
	_, pos := placedToken(t, h, res)
	assert.Equal(t, int64(2), pos)
}

// TestAfterPurchasePreQueueToken: a pre-queue token whose drawn position
// was revoked never admits, on the buyer's pages too (API.md §12): the
// token the draw gave is the one that reaches them.
func TestAfterPurchasePreQueueToken(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.AfterPurchase = buyerPages
		pre := oneEntrantDrawn(t, h, clk, get(h, ""))
		res := serveRevoking(t, h, withToken(h, pre))
		drawn, pos := placedToken(t, h, res)
		require.Equal(t, pos, admittedAt(res))
		user := res.next.Header.Get(HeaderUser)

		r := withToken(h, pre)
		r.URL.Path = "/bookings/1"
		res = do(t, h, r)
		notPassed(t, res, "the pre-queue token")
		_, again := placedToken(t, h, res)
		assert.Greater(t, again, pos, "a new arrival at the back")

		passedCompleted(t, h, do(t, h, at(h, "/bookings/1", drawn)), user, pos)
	})
}

// TestAfterPurchasePatterns: bad patterns fail the load, naming the
// pattern; good ones match as Caddy's path matcher does.
func TestAfterPurchasePatterns(t *testing.T) {
	for _, c := range []struct {
		pattern, err string
	}{
		{"", `after_purchase: pattern 2 is empty`},
		{"bookings/*", `after_purchase: "bookings/*" is not a path: it must start with / (or * for a suffix)`},
		{"/bookings/[", `after_purchase: "/bookings/[" is not a valid pattern`},
		{"*", `after_purchase: "*" matches every path`},
		{"/*", `after_purchase: "/*" matches every path`},
		{"**", `after_purchase: "**" matches every path`},
		{"*/*", `after_purchase: "*/*" matches every path`},
		{"{http.request.uri.path}", `after_purchase: "{http.request.uri.path}" matches every path`},
		{"{http.request.orig_uri.path}*", `after_purchase: "{http.request.orig_uri.path}*" matches every path`},
	} {
		t.Run(c.pattern, func(t *testing.T) {
			h := &Handler{Event: 1, Keys: []Key{{ID: "k1", Secret: testSecret}}, AfterPurchase: []string{"/tickets", c.pattern}}
			err := h.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.err)
		})
	}
	h := &Handler{Event: 1, Keys: []Key{{ID: "k1", Secret: testSecret}},
		AfterPurchase: []string{"/Bookings/*", "*.png", "/tickets", "/my/{http.request.host}/*", "/qr/%40*", "/*/tickets", "/**"}}
	require.NoError(t, h.Validate())
}

// TestAfterPurchaseJSON: the JSON field, as a config gives it.
func TestAfterPurchaseJSON(t *testing.T) {
	var h Handler
	require.NoError(t, json.Unmarshal([]byte(`{"handler":"waitroom","event":7,"keys":[{"id":"k1","secret":"`+testSecret+`"}],`+
		`"after_purchase":["/bookings/*","/TICKETS"]}`), &h))
	assert.Equal(t, []string{"/bookings/*", "/TICKETS"}, h.AfterPurchase)
	provision(t, &h)
	assert.Equal(t, []string{"/bookings/*", "/TICKETS"}, h.AfterPurchase, "the config is not rewritten")

	setWatermark(t, &h, 1)
	res := do(t, &h, at(&h, "/buy", ""))
	tok, pos := placedToken(t, &h, res)
	user := res.next.Header.Get(HeaderUser)
	serveRevoking(t, &h, at(&h, "/buy", tok))
	passedCompleted(t, &h, do(t, &h, at(&h, "/tickets", tok)), user, pos)

	bad := Handler{Event: 7, Keys: []Key{{ID: "k1", Secret: testSecret}}, AfterPurchase: []string{"tickets"}}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	err := bad.Provision(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `after_purchase: "tickets" is not a path`)
}

func TestUnmarshalCaddyfileAfterPurchase(t *testing.T) {
	for _, c := range []struct {
		name, input string
		want        []string
		err         string
	}{
		{name: "one", input: "waitroom {\n after_purchase /tickets\n}", want: []string{"/tickets"}},
		{name: "several, repeated", input: "waitroom {\n after_purchase /bookings/* /tickets\n after_purchase /v1/tickets/*.png\n}",
			want: []string{"/bookings/*", "/tickets", "/v1/tickets/*.png"}},
		{name: "none", input: "waitroom {\n after_purchase\n}", err: "after_purchase: want at least one path pattern"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(c.input))
			if c.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.err)
				assert.Contains(t, err.Error(), "Testfile:", "the error names where it is")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, h.AfterPurchase)
		})
	}

	// A bad pattern fails the config's validation, named.
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(":8080 {\n\twaitroom {\n\t\tevent 42\n\t\tkey k1 "+testSecret+
		"\n\t\tafter_purchase /tickets bookings/*\n\t}\n\trespond ok\n}\n"), nil)
	require.NoError(t, err)
	var cfg caddy.Config
	require.NoError(t, json.Unmarshal(out, &cfg))
	err = caddy.Validate(&cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `after_purchase: "bookings/*" is not a path`)
}

// TestAfterPurchaseWhenSoldOut: the sale's end is no reason to lose a
// purchase: the completed still reach the buyer's pages of a sold-out
// event, and everyone else gets the 410 as before.
func TestAfterPurchaseWhenSoldOut(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.AfterPurchase = buyerPages
		h.UserID = "{http.request.header.X-User-ID}"
		provision(t, h)
		setWatermark(t, h, 2)
		res := do(t, h, at(h, "/buy", ""))
		anon, anonPos := placedToken(t, h, res)
		user := res.next.Header.Get(HeaderUser)
		serveRevoking(t, h, at(h, "/buy", anon))
		alice, alicePos := placedToken(t, h, do(t, h, asUser(at(h, "/buy", ""), "alice")))
		serveRevoking(t, h, asUser(at(h, "/buy", alice), "alice"))
		update(t, h, waitroom.Change{SoldOut: ptr(true)})

		passedCompleted(t, h, do(t, h, at(h, "/tickets", anon)), user, anonPos)
		passedCompleted(t, h, do(t, h, asUser(at(h, "/tickets", ""), "alice")), "alice", alicePos)
		for _, r := range []*http.Request{at(h, "/buy", anon), at(h, "/tickets", ""), asUser(at(h, "/tickets", ""), "bob")} {
			res := do(t, h, r)
			notPassed(t, res, r.URL.Path)
			assert.Equal(t, StatusSoldOut, res.status())
		}
	})
}

// TestAfterPurchaseExample: the example's after_purchase reaches the
// bundled storefront's pages after the purchase (origin/storefront and
// origin/routes.go), the hold's page among them (Back to it after paying
// leads to the booking), and none where a buyer makes a hold.
func TestAfterPurchaseExample(t *testing.T) {
	for _, file := range []string{"../Caddyfile.example", "../examples/Caddyfile"} {
		t.Run(file, func(t *testing.T) {
			for k, v := range map[string]string{"WAITROOM_SECRET": testSecret, "WAITROOM_PORT": "8080", "WAITROOM_ADMIN_PORT": "2019",
				"WAITROOM_EVENT": "42", "ORIGIN_ADDR": "127.0.0.1:8081", "REDIS_URL": "redis://127.0.0.1:6379/0"} {
				t.Setenv(k, v)
			}
			text, err := os.ReadFile(file)
			require.NoError(t, err)
			out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(text, map[string]any{"filename": file})
			require.NoError(t, err)
			var patterns []string
			var find func(v any)
			find = func(v any) {
				switch v := v.(type) {
				case map[string]any:
					if v["handler"] == "waitroom" {
						for _, p := range v["after_purchase"].([]any) {
							patterns = append(patterns, p.(string))
						}
					}
					for _, x := range v {
						find(x)
					}
				case []any:
					for _, x := range v {
						find(x)
					}
				}
			}
			var cfg any
			require.NoError(t, json.Unmarshal(out, &cfg))
			find(cfg)
			require.NotEmpty(t, patterns)
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			m, err := afterPurchaseMatcher(ctx, patterns)
			require.NoError(t, err)
			match := func(method, path string) bool {
				r := httptest.NewRequest(method, "http://tickets.test"+path, nil)
				r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
				return m.Match(r)
			}
			for _, p := range []string{"/", "/bookings/0b6f", "/bookings/0b6f/cancellation", "/tickets", "/assets/shop.css", "/assets/shop.js",
				"/favicon.ico", "/v1/bookings/0b6f", "/v1/tickets/ABC.png", "/holds/7", "/holds/7/booking"} {
				assert.True(t, match(http.MethodGet, p), "%s reaches the buyer after the purchase", p)
			}
			for _, p := range []string{"/events/1", "/events/1/holds", "/v1/events/1/holds", "/v1/bookings", "/v1/holds/7"} {
				assert.False(t, match(http.MethodGet, p), "%s is not for the completed", p)
			}
		})
	}
}

// TestAfterPurchaseKeepsTheRevocationsEnd: the site's revoke on a
// completed visitor's page (a confirmed booking's page says it each time)
// has nothing left to end: the revocation ends when it would have, and the
// account may queue again.
func TestAfterPurchaseKeepsTheRevocationsEnd(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.AfterPurchase = buyerPages
		h.UserID = "{http.request.header.X-User-ID}"
		provision(t, h)
		setWatermark(t, h, 1)
		tok, _ := placedToken(t, h, do(t, h, asUser(at(h, "/buy", ""), "alice")))
		serveRevoking(t, h, asUser(at(h, "/buy", tok), "alice"))
		revokedAt := clk.Now()

		clk.Advance(20 * time.Minute)
		refresh(t, h)
		res := doAs(t, h, asUser(at(h, "/bookings/1", tok), "alice"), true)
		require.NotNil(t, res.next)
		refresh(t, h)

		clk.Advance(revokedAt.Add(DefaultTokenTTL + revokeLeeway).Sub(clk.Now()))
		refresh(t, h)
		res = do(t, h, asUser(at(h, "/bookings/1", ""), "alice"))
		notPassed(t, res, "after the revocation ended")
		assert.Equal(t, StatusWaiting, res.status(), "the revocation ended: a place at the back")
	})
}

// TestAfterPurchaseSignedInLater: a visitor who bought anonymously and
// signed in since reaches the buyer's pages by its revoked token, as it
// did; an anonymous token whose place an account took is not a purchase:
// on those pages it is the account's place.
func TestAfterPurchaseSignedInLater(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.AfterPurchase = buyerPages
		h.UserID = "{http.request.header.X-User-ID}"
		provision(t, h)
		setWatermark(t, h, 1)
		bought, p1 := placedToken(t, h, do(t, h, at(h, "/buy", "")))
		serveRevoking(t, h, at(h, "/buy", bought))
		tk, err := h.keys.Verify(bought, h.Event)
		require.NoError(t, err)
		passedCompleted(t, h, do(t, h, asUser(at(h, "/tickets", bought), "alice")), tk.Subject, p1)

		waiting, p2 := placedToken(t, h, do(t, h, at(h, "/buy", "")))
		_, pos := placedToken(t, h, do(t, h, asUser(at(h, "/buy", waiting), "bob")))
		require.Equal(t, p2, pos, "bob took the place")
		res := do(t, h, asUser(at(h, "/tickets", waiting), "bob"))
		assert.NotEqual(t, StatusCompleted, res.status(), "no purchase of bob's: %s %s", res.status(), res.rec.Body.String())
		assert.Equal(t, p2, res.waiting(t).Position, "bob's place")
		res = do(t, h, at(h, "/tickets", waiting))
		notPassed(t, res, "/tickets")
		assert.NotEqual(t, StatusCompleted, res.status(), "the token bob took the place of bought nothing")
	})
}

// TestAfterPurchaseReceipt: the answer that revokes a buyer's token gives
// it that token as its receipt; once a click elsewhere made the buyer a new
// arrival (its queue cookie replaced), the buyer's pages still pass it on
// as the buyer it was, until its new token is admitted there. Anywhere
// else the receipt does nothing.
func TestAfterPurchaseReceipt(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.AfterPurchase = buyerPages
		provision(t, h)
		setWatermark(t, h, 1)
		bought, p := placedToken(t, h, do(t, h, at(h, "/buy", "")))
		res := serveRevoking(t, h, at(h, "/buy", bought))
		rc := res.cookie(t, h.cookieName+receiptSuffix)
		require.NotNil(t, rc, "the revoking answer gives the receipt")
		assert.Equal(t, bought, rc.Value)
		assert.True(t, rc.HttpOnly)
		tk, err := h.keys.Verify(bought, h.Event)
		require.NoError(t, err)

		// A click on the event's page: a new arrival, a new queue cookie.
		again, q := placedToken(t, h, do(t, h, at(h, "/events/1", bought)))
		require.Greater(t, q, p)
		withReceipt := func(path, queue string) *http.Request {
			r := at(h, path, queue)
			r.AddCookie(&http.Cookie{Name: h.cookieName + receiptSuffix, Value: rc.Value})
			return r
		}
		res = do(t, h, at(h, "/tickets", again))
		assert.Equal(t, StatusWaiting, res.status(), "without the receipt, the queue")
		passedCompleted(t, h, do(t, h, withReceipt("/tickets", again)), tk.Subject, p)
		passedCompleted(t, h, do(t, h, withReceipt("/bookings/1", "")), tk.Subject, p)
		res = do(t, h, withReceipt("/events/1", again))
		notPassed(t, res, "/events/1")
		assert.Equal(t, q, res.waiting(t).Position, "elsewhere the receipt does nothing")

		setWatermark(t, h, q)
		refresh(t, h)
		res = do(t, h, withReceipt("/tickets", again))
		require.Equal(t, q, admittedAt(res), "its new token admitted there: %s", res.status())
		assert.NotEqual(t, tk.Subject, res.next.Header.Get(HeaderUser))
	})
}
