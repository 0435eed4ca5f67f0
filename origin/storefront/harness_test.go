package storefront_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/redisurl"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/waitroom"
)

const adminToken = "test-admin-token"

var (
	secret    = []byte("0123456789abcdef0123456789abcdef")
	ticketKey = []byte("ticket-key-0123456789abcdef-0123456789")
	buyerKey  = []byte("buyer-key-0123456789abcdef-0123456789")
)

// shop is an origin over real Redis and PostgreSQL charging through
// fakepay, served by httptest, with its storefront at /.
type shop struct {
	t     *testing.T
	url   string
	srv   *origin.Server
	clock *testenv.Clock
	keys  *waitroom.KeySet
	store *waitroom.RedisStore
	fp    *payment.Fakepay
	lg    *ledger.Ledger
}

type shopOptions struct {
	// noPayments: an origin without a payment provider.
	noPayments bool
	// quietWebhooks: fakepay sends no webhook until the test sets its URL.
	quietWebhooks bool
}

func newShop(t *testing.T, o shopOptions) *shop {
	t.Helper()
	c := testenv.NewClock(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))
	rdb, err := redisurl.New(testenv.RedisURL(t), redisurl.Defaults{PoolSize: 50})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	lg, err := ledger.Open(ctx, testenv.Postgres(t), ledger.Options{MaxConns: 10})
	require.NoError(t, err)
	t.Cleanup(lg.Close)
	s := &shop{t: t, clock: c, store: waitroom.NewRedisStore(rdb, waitroom.RedisOptions{}), lg: lg}
	s.keys, err = waitroom.NewKeySet(c.Now, waitroom.Key{ID: "k1", Secret: secret})
	require.NoError(t, err)
	cfg := origin.Config{
		Keys: s.keys, AdminToken: adminToken, Clock: c.Now, RebuildSettle: -1,
		ClockSkewMargin: 10 * time.Millisecond, HoldWriteTimeout: 20 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), BuyerKey: buyerKey,
		// The map as it is at each read: the tests look at it right after
		// a change.
		SeatMapMaxAge: time.Nanosecond,
	}
	if !o.noPayments {
		s.fp, err = payment.NewFakepay(ctx, payment.FakepayConfig{Now: c.Now, WebhookSecret: "whsec_test_secret", Seed: 42,
			HTTPClient: &http.Client{Timeout: 10 * time.Second}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.fp.Close() })
		cfg.Payments, cfg.TicketKey = s.fp, ticketKey
	}
	s.srv, err = origin.New(cfg, lg, rdb)
	require.NoError(t, err)
	require.NoError(t, s.srv.Start(ctx))
	ts := httptest.NewServer(s.srv.Handler())
	t.Cleanup(ts.Close)
	s.url = ts.URL
	if s.fp != nil && !o.quietWebhooks {
		s.fp.SetWebhookURL(ts.URL + "/v1/webhooks/fakepay")
	}
	return s
}

// gaEvent creates a general-admission event; seatedEvent one with two
// reserved sections and a standing one. Everyone is admitted.
func (s *shop) gaEvent(name string) int64 {
	return s.createEvent(map[string]any{"name": name, "capacity": 100, "price": 90000, "overflow_pct": 0})
}

func (s *shop) seatedEvent(name string) int64 {
	return s.createEvent(map[string]any{"name": name, "seating": map[string]any{"sections": []any{
		map[string]any{"id": "A", "price": 120000, "rows": []any{map[string]any{"id": "1", "seats": 6}, map[string]any{"id": "2", "seats": 6}}},
		map[string]any{"id": "B", "price": 80000, "rows": []any{map[string]any{"id": "1", "seats": 8}}},
		map[string]any{"id": "GA-East", "price": 50000, "capacity": 30},
	}}})
}

func (s *shop) createEvent(fields map[string]any) int64 {
	s.t.Helper()
	body := map[string]any{"id": testenv.EventID(), "currency": "inr", "hold_ttl_seconds": 600, "max_per_user": 4}
	for k, v := range fields {
		body[k] = v
	}
	raw, err := json.Marshal(body)
	require.NoError(s.t, err)
	req, err := http.NewRequest(http.MethodPost, s.url+"/v1/events", strings.NewReader(string(raw)))
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	require.Equal(s.t, http.StatusCreated, resp.StatusCode, "%s", out)
	var ev struct {
		ID int64 `json:"id"`
	}
	require.NoError(s.t, json.Unmarshal(out, &ev))
	s.admit(ev.ID, 1_000_000)
	return ev.ID
}

func (s *shop) admit(event, watermark int64) {
	s.t.Helper()
	_, err := s.store.Update(context.Background(), event, waitroom.Change{SetWatermark: &watermark})
	require.NoError(s.t, err)
}

// settle waits until fakepay has delivered its webhooks.
func (s *shop) settle() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(s.t, s.fp.WaitIdle(ctx))
}

// buyer is a browser: its own cookies, redirects not followed (the tests
// look at each answer).
type buyer struct {
	s      *shop
	t      *testing.T
	client *http.Client
	jar    *cookiejar.Jar
	// header is sent with every request.
	header http.Header
	// lastPath is the page the last redirect followed led to.
	lastPath string
}

func (s *shop) shopper() *buyer {
	jar, err := cookiejar.New(nil)
	require.NoError(s.t, err)
	return &buyer{s: s, t: s.t, jar: jar, header: http.Header{}, client: &http.Client{Jar: jar, Timeout: time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// enter gives the buyer the gateway's queue token of event as user, at
// position 1.
func (b *buyer) enter(user string, event int64) *buyer {
	b.t.Helper()
	tk, err := b.s.keys.Issue(user, event, 1, 24*time.Hour)
	require.NoError(b.t, err)
	u, _ := url.Parse(b.s.url)
	b.jar.SetCookies(u, []*http.Cookie{{Name: waitroom.CookieName(event), Value: tk.Raw, Path: "/"}})
	return b
}

// dropToken forgets the queue token of event, as a revoked or expired
// one is to the gateway.
func (b *buyer) dropToken(event int64) {
	u, _ := url.Parse(b.s.url)
	b.jar.SetCookies(u, []*http.Cookie{{Name: waitroom.CookieName(event), Value: "", Path: "/", MaxAge: -1}})
}

func (b *buyer) cookie(name string) *http.Cookie {
	u, _ := url.Parse(b.s.url)
	for _, c := range b.jar.Cookies(u) {
		if c.Name == name {
			return c
		}
	}
	return nil
}

type page struct {
	status int
	header http.Header
	body   string
}

func (b *buyer) do(req *http.Request) page {
	b.t.Helper()
	for k, v := range b.header {
		req.Header[k] = v
	}
	resp, err := b.client.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return page{status: resp.StatusCode, header: resp.Header, body: string(raw)}
}

func (b *buyer) get(path string) page {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.s.url+path, nil)
	require.NoError(b.t, err)
	return b.do(req)
}

// post sends a form, as the browser of a page of this site does.
func (b *buyer) post(path string, form url.Values, headers ...string) page {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.s.url+path, strings.NewReader(form.Encode()))
	require.NoError(b.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return b.do(req)
}

// follow is the page a 303 leads to.
func (b *buyer) follow(p page) page {
	b.t.Helper()
	require.Equal(b.t, http.StatusSeeOther, p.status, "want a redirect: %s", p.body)
	b.lastPath = p.header.Get("Location")
	return b.get(b.lastPath)
}

var keyField = regexp.MustCompile(`name="key" value="([0-9a-f-]{36})"`)

// key is the idempotency key the page's forms carry.
func (p page) key(t *testing.T) string {
	t.Helper()
	m := keyField.FindStringSubmatch(p.body)
	require.NotNil(t, m, "no key in the page: %s", p.body)
	return m[1]
}

// holdSeats holds seats through the event page's form and returns the
// hold page.
func (b *buyer) holdSeats(event int64, seats ...string) page {
	b.t.Helper()
	ev := b.get(fmt.Sprintf("/events/%d", event))
	require.Equal(b.t, http.StatusOK, ev.status, ev.body)
	res := b.post(fmt.Sprintf("/events/%d/holds", event), url.Values{"key": {ev.key(b.t)}, "mode": {"seats"}, "seat": seats})
	return b.follow(res)
}

var holdPath = regexp.MustCompile(`action="(/holds/[0-9a-f-]{36})/booking"`)

// holdOf is the path of the hold the hold page shows.
func (p page) holdOf(t *testing.T) string {
	t.Helper()
	m := holdPath.FindStringSubmatch(p.body)
	require.NotNil(t, m, "no pay form in the page: %s", p.body)
	return m[1]
}

// pay sends the hold page's pay form with card.
func (b *buyer) pay(hold page, card string) page {
	b.t.Helper()
	return b.post(hold.holdOf(b.t)+"/booking", url.Values{"key": {hold.key(b.t)}, "card": {card}})
}
