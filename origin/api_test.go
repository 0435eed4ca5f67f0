package origin_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/hashtag"
	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/idem"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/waitroom"
)

func TestHoldBadInput(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 10, "max_per_user": 4})
	other := h.createEvent(nil)
	// createEvent admits up to position 1,000,000. A position beyond it is
	// not admitted; lowering the watermark instead would race the origin's
	// copy of the state, which learns of the change asynchronously.
	notAdmitted := int64(1_000_001)
	path := fmt.Sprintf("/v1/events/%d/holds", ev.ID)
	forger, err := waitroom.NewKeySet(h.clock.Now, waitroom.Key{ID: "k1", Secret: []byte(strings.Repeat("x", 32))})
	require.NoError(t, err)
	forged, err := forger.Issue("mallory", ev.ID, 1, time.Hour)
	require.NoError(t, err)
	expired, err := h.keys.Issue("late", ev.ID, 1, -time.Hour)
	require.NoError(t, err)

	good := func() map[string]string {
		return map[string]string{waitroom.TokenHeader: h.token("ann", ev.ID, 1), "Idempotency-Key": "k"}
	}
	with := func(k, v string) map[string]string {
		m := good()
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name    string
		method  string
		path    string
		body    any
		headers map[string]string
		status  int
		code    string
	}{
		{"no token", "POST", path, `{"quantity":1}`, with(waitroom.TokenHeader, ""), 401, "invalid_token"},
		{"garbage token", "POST", path, `{"quantity":1}`, with(waitroom.TokenHeader, "not.a.jwt"), 401, "invalid_token"},
		{"forged token", "POST", path, `{"quantity":1}`, with(waitroom.TokenHeader, forged.Raw), 401, "invalid_token"},
		{"expired token", "POST", path, `{"quantity":1}`, with(waitroom.TokenHeader, expired.Raw), 401, "invalid_token"},
		{"token of another event", "POST", path, `{"quantity":1}`, with(waitroom.TokenHeader, h.token("ann", other.ID, 1)), 401, "invalid_token"},
		{"not admitted yet", "POST", path, `{"quantity":1}`, with(waitroom.TokenHeader, h.token("ann", ev.ID, notAdmitted)), 403, "not_admitted"},
		{"no idempotency key", "POST", path, `{"quantity":1}`, with("Idempotency-Key", ""), 400, "missing_idempotency_key"},
		{"idempotency key too long", "POST", path, `{"quantity":1}`, with("Idempotency-Key", strings.Repeat("k", 256)), 400, "missing_idempotency_key"},
		{"idempotency key of 256 multi-byte characters", "POST", path, `{"quantity":1}`, with("Idempotency-Key", strings.Repeat("é", 256)), 400, "missing_idempotency_key"},
		{"idempotency key not UTF-8", "POST", path, `{"quantity":1}`, with("Idempotency-Key", "k\xff"), 400, "missing_idempotency_key"},
		{"quantity 0", "POST", path, `{"quantity":0}`, good(), 400, "invalid_request"},
		{"negative quantity", "POST", path, `{"quantity":-1}`, good(), 400, "invalid_request"},
		{"fractional quantity", "POST", path, `{"quantity":1.5}`, good(), 400, "invalid_request"},
		{"exponent quantity", "POST", path, `{"quantity":1e3}`, good(), 400, "invalid_request"},
		{"quantity as a string", "POST", path, `{"quantity":"2"}`, good(), 400, "invalid_request"},
		{"quantity null", "POST", path, `{"quantity":null}`, good(), 400, "invalid_request"},
		{"quantity missing", "POST", path, `{}`, good(), 400, "invalid_request"},
		{"quantity above the limit", "POST", path, `{"quantity":5}`, good(), 422, "exceeds_per_user_limit"},
		{"huge quantity", "POST", path, `{"quantity":100000000000000000000000000000}`, good(), 422, "exceeds_per_user_limit"},
		{"unknown field", "POST", path, `{"quantity":1,"seats":["A1"]}`, good(), 400, "invalid_request"},
		{"not JSON", "POST", path, `quantity=1`, good(), 400, "invalid_request"},
		{"truncated JSON", "POST", path, `{"quantity":1`, good(), 400, "invalid_request"},
		{"two objects", "POST", path, `{"quantity":1}{"quantity":2}`, good(), 400, "invalid_request"},
		{"array body", "POST", path, `[1]`, good(), 400, "invalid_request"},
		{"empty body", "POST", path, ``, good(), 400, "invalid_request"},
		{"body over 64 KiB", "POST", path, `{"quantity":1,"pad":"` + strings.Repeat("x", 70<<10) + `"}`, good(), 413, ""},
		{"unknown event", "POST", "/v1/events/999999999999999/holds", `{"quantity":1}`, good(), 404, "not_found"},
		{"event id not a number", "POST", "/v1/events/final/holds", `{"quantity":1}`, good(), 404, "not_found"},
		{"wrong method", "PUT", path, `{"quantity":1}`, good(), 405, "method_not_allowed"},
		{"unknown route", "GET", "/v1/seats", nil, nil, 404, "not_found"},
		{"hold id not a uuid", "GET", "/v1/holds/h_41", nil, good(), 404, "not_found"},
		{"unknown hold", "GET", "/v1/holds/01a2298d-28d3-70bb-a166-30d6d30a91ab", nil, good(), 404, "not_found"},
		{"hold without a token", "GET", "/v1/holds/01a2298d-28d3-70bb-a166-30d6d30a91ab", nil, nil, 401, "invalid_token"},
		{"unknown event read", "GET", "/v1/events/999999999999999", nil, nil, 404, "not_found"},
		{"invariant without a token", "GET", fmt.Sprintf("/v1/admin/events/%d/invariant", ev.ID), nil, nil, 401, "unauthorized"},
		{"invariant with a wrong token", "GET", fmt.Sprintf("/v1/admin/events/%d/invariant", ev.ID), nil, map[string]string{"Authorization": "Bearer nope"}, 401, "unauthorized"},
		{"rebuild with a buyer's token", "POST", fmt.Sprintf("/v1/admin/events/%d/rebuild", ev.ID), nil, good(), 401, "unauthorized"},
		{"invariant with the token as a Basic credential", "GET", fmt.Sprintf("/v1/admin/events/%d/invariant", ev.ID), nil, map[string]string{"Authorization": "Basic " + adminToken}, 401, "unauthorized"},
		{"invariant with the token alone", "GET", fmt.Sprintf("/v1/admin/events/%d/invariant", ev.ID), nil, map[string]string{"Authorization": adminToken}, 401, "unauthorized"},
		// The scheme's name is case-insensitive.
		{"invariant, scheme in lower case", "GET", fmt.Sprintf("/v1/admin/events/%d/invariant", ev.ID), nil, map[string]string{"Authorization": "bearer " + adminToken}, 200, ""},
		{"invariant, scheme in upper case", "GET", fmt.Sprintf("/v1/admin/events/%d/invariant", ev.ID), nil, map[string]string{"Authorization": "BEARER " + adminToken}, 200, ""},
		{"invariant of an unknown event", "GET", "/v1/admin/events/999999999999999/invariant", nil, admin(), 404, "not_found"},
		{"create event without a token", "POST", "/v1/events", `{"name":"x","capacity":1,"price":1,"currency":"usd"}`, nil, 401, "unauthorized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := h.with(t)
			res := h.do(tt.method, tt.path, tt.body, tt.headers)
			assert.Equal(t, tt.status, res.status, "%s", res.body)
			assert.Equal(t, "application/json", res.header.Get("Content-Type"))
			if tt.code != "" {
				assert.Equal(t, tt.code, res.errorCode(t))
			}
		})
	}
	inv := h.requireInvariant(ev.ID, 0)
	assert.Equal(t, int64(10), inv.Remaining, "no bad request took a seat")
}

func TestHoldCookieToken(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(nil)
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/v1/events/%d/holds", h.url, ev.ID), strings.NewReader(`{"quantity":2}`))
	require.NoError(t, err)
	req.AddCookie(&http.Cookie{Name: waitroom.CookieName(ev.ID), Value: h.token("browser", ev.ID, 5)})
	req.Header.Set("Idempotency-Key", "k")
	resp, err := h.client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
}

func TestHoldLifecycleAndSoldOut(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 3, "price": 2500, "currency": "EUR"})
	res := h.hold(ev.ID, "ann", 2, "a")
	require.Equal(t, http.StatusCreated, res.status)
	var ann holdJSON
	res.json(t, &ann)
	assert.Equal(t, holdJSON{
		HoldID: ann.HoldID, EventID: ev.ID, UserID: "ann", Quantity: 2, Status: "pending",
		ExpiresAt: "2026-05-01T10:10:00Z", Amount: 5000, Currency: "eur",
	}, ann)
	assert.False(t, h.state(ev.ID).SoldOut)

	res = h.hold(ev.ID, "bob", 2, "b")
	assert.Equal(t, http.StatusConflict, res.status)
	assert.Equal(t, "sold_out", res.errorCode(t))
	require.Equal(t, http.StatusCreated, h.hold(ev.ID, "bob", 1, "b2").status)
	assert.True(t, h.state(ev.ID).SoldOut, "remaining 0 tells every gateway")
	var got eventJSON
	h.do(http.MethodGet, fmt.Sprintf("/v1/events/%d", ev.ID), nil, nil).json(t, &got)
	assert.Equal(t, int64(0), got.Remaining)
	assert.True(t, got.SoldOut)

	annAuth := map[string]string{waitroom.TokenHeader: h.token("ann", ev.ID, 1)}
	bobAuth := map[string]string{waitroom.TokenHeader: h.token("bob", ev.ID, 1)}
	assert.Equal(t, http.StatusNotFound, h.do(http.MethodGet, "/v1/holds/"+ann.HoldID, nil, bobAuth).status, "another user's hold")
	assert.Equal(t, http.StatusNotFound, h.do(http.MethodDelete, "/v1/holds/"+ann.HoldID, nil, bobAuth).status)
	other := h.createEvent(map[string]any{"capacity": 3, "price": 2500, "currency": "EUR"})
	for user, what := range map[string]string{"bob": "another user's hold, his token of another event", "ann": "her own hold, her token of another event"} {
		res := h.do(http.MethodGet, "/v1/holds/"+ann.HoldID, nil, map[string]string{waitroom.TokenHeader: h.token(user, other.ID, 1)})
		assert.Equal(t, http.StatusNotFound, res.status, what)
		assert.Equal(t, "not_found", res.errorCode(t))
	}
	forged := h.token("bob", ev.ID, 1)
	forged = forged[:len(forged)-4] + "AAAA"
	assert.Equal(t, http.StatusUnauthorized, h.do(http.MethodGet, "/v1/holds/"+ann.HoldID, nil, map[string]string{waitroom.TokenHeader: forged}).status,
		"no valid token at all")
	get := h.do(http.MethodGet, "/v1/holds/"+ann.HoldID, nil, annAuth)
	require.Equal(t, http.StatusOK, get.status)
	var again holdJSON
	get.json(t, &again)
	assert.Equal(t, ann, again)

	del := h.do(http.MethodDelete, "/v1/holds/"+ann.HoldID, nil, annAuth)
	assert.Equal(t, http.StatusNoContent, del.status)
	assert.Empty(t, del.body)
	assert.False(t, h.state(ev.ID).SoldOut, "returned seats clear the sold-out flag")
	del = h.do(http.MethodDelete, "/v1/holds/"+ann.HoldID, nil, annAuth)
	assert.Equal(t, http.StatusConflict, del.status)
	assert.Equal(t, "hold_not_active", del.errorCode(t))
	h.do(http.MethodGet, "/v1/holds/"+ann.HoldID, nil, annAuth).json(t, &again)
	assert.Equal(t, "released", again.Status)
	inv := h.requireInvariant(ev.ID, 1)
	assert.Equal(t, int64(2), inv.Remaining)

	// After the release ann can hold again.
	assert.Equal(t, http.StatusCreated, h.hold(ev.ID, "ann", 2, "a-new").status)
}

func TestIdempotencyKey(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 5})
	ctx := context.Background()

	first := h.hold(ev.ID, "ann", 2, "pay-1")
	require.Equal(t, http.StatusCreated, first.status)
	replay := h.do(http.MethodPost, fmt.Sprintf("/v1/events/%d/holds", ev.ID), "{ \"quantity\" : 2 }",
		map[string]string{waitroom.TokenHeader: h.token("ann", ev.ID, 1), "Idempotency-Key": "pay-1"})
	assert.Equal(t, http.StatusCreated, replay.status, "the same request written differently is the same request")
	assert.Equal(t, string(first.body), string(replay.body), "byte for byte")
	assert.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))

	other := h.hold(ev.ID, "ann", 3, "pay-1")
	assert.Equal(t, http.StatusUnprocessableEntity, other.status)
	assert.Equal(t, "idempotency_key_reused", other.errorCode(t))

	// Another user may use the same key for their own request.
	assert.Equal(t, http.StatusCreated, h.hold(ev.ID, "bob", 1, "pay-1").status)

	// Non-201 answers are kept too.
	sold := h.hold(ev.ID, "cat", 4, "cat-1")
	require.Equal(t, http.StatusConflict, sold.status)
	h.do(http.MethodDelete, "/v1/holds/"+holdID(t, first), nil, map[string]string{waitroom.TokenHeader: h.token("ann", ev.ID, 1)})
	soldAgain := h.hold(ev.ID, "cat", 4, "cat-1")
	assert.Equal(t, string(sold.body), string(soldAgain.body), "the first answer, though seats came back since")
	assert.Equal(t, http.StatusConflict, soldAgain.status)

	// Without Redis's records, the ledger still answers the replay: while
	// the hold is live (from the hold's own record), and after it ended
	// (from the row's stored response).
	dan := h.hold(ev.ID, "dan", 1, "dan-1")
	require.Equal(t, http.StatusCreated, dan.status)
	dropIdempotencyRecords(t, h, ev.ID)
	r := h.hold(ev.ID, "dan", 1, "dan-1")
	assert.Equal(t, http.StatusCreated, r.status)
	assert.Equal(t, string(dan.body), string(r.body))
	r = h.hold(ev.ID, "dan", 2, "dan-1")
	assert.Equal(t, http.StatusUnprocessableEntity, r.status)

	dropIdempotencyRecords(t, h, ev.ID)
	r = h.hold(ev.ID, "ann", 2, "pay-1")
	assert.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	assert.Equal(t, string(first.body), string(r.body), "replayed from the ledger after the hold was released")
	h.requireInvariant(ev.ID, 2)

	// While the first request still runs.
	scope := idem.Scope{Kind: "holds", Event: ev.ID, User: "eve", Key: "eve-1"}
	stored, err := h.srv.Idempotency().Begin(ctx, scope, idem.RequestDigest("quantity=1"))
	require.NoError(t, err)
	require.Nil(t, stored)
	busy := h.hold(ev.ID, "eve", 1, "eve-1")
	assert.Equal(t, http.StatusConflict, busy.status)
	assert.Equal(t, "request_in_progress", busy.errorCode(t))
	assert.Equal(t, http.StatusUnprocessableEntity, h.hold(ev.ID, "eve", 2, "eve-1").status)

	// A 5xx is not kept: the retry runs again.
	require.NoError(t, h.srv.Idempotency().Finish(ctx, scope, idem.RequestDigest("quantity=1"),
		idem.StoredResponse{Status: http.StatusServiceUnavailable, Body: []byte("{}")}))
	assert.Equal(t, http.StatusCreated, h.hold(ev.ID, "eve", 1, "eve-1").status)
}

// A hold request that claimed its key and died before its row was written
// (a crashed node) blocks the key while it could still be running, then
// its claim is taken over.
func TestHoldClaimOfADeadRequest(t *testing.T) {
	h := newHarness(t, harnessOptions{config: func(c *origin.Config) {
		// The dead request's write, if it sent one, is final this long
		// (real time) after its seat is found.
		c.HoldWriteTimeout = time.Second
	}})
	ev := h.createEvent(map[string]any{"capacity": 5})
	ctx := context.Background()
	dead := "01a22a00-0000-7000-8000-000000000001"
	claimByDeadRequest(t, h, ev.ID, dead)

	busy := h.hold(ev.ID, "zed", 1, "z-1")
	assert.Equal(t, http.StatusConflict, busy.status, "%s", busy.body)
	assert.Equal(t, "request_in_progress", busy.errorCode(t))
	assert.Equal(t, http.StatusUnprocessableEntity, h.hold(ev.ID, "zed", 2, "z-1").status)

	// Past the longest a request may run, the claim is taken over; the dead
	// request's seat has no row, so it is checked like an uncertain write.
	h.clock.Advance(time.Minute)
	r := h.hold(ev.ID, "zed", 1, "z-1")
	assert.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r.body)
	h.srv.WaitUncertainFinal()
	n, err := h.srv.ResolveUncertain(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	h.requireInvariant(ev.ID, 0)

	r = h.hold(ev.ID, "zed", 1, "z-1")
	assert.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	assert.NotEqual(t, dead, holdID(t, r))
	h.requireInvariant(ev.ID, 1)
}

// The check of an uncertain write waits for the holds table's writes to end
// only briefly: while one is still running it gives way and asks again on
// the next call, rather than hold up every hold write behind its lock.
func TestUncertainCheckGivesWayToHoldWrites(t *testing.T) {
	h := newHarness(t, harnessOptions{config: func(c *origin.Config) { c.HoldWriteTimeout = time.Second }})
	ev := h.createEvent(map[string]any{"capacity": 5})
	ctx := context.Background()
	claimByDeadRequest(t, h, ev.ID, "01a22a00-0000-7000-8000-000000000002")
	h.clock.Advance(time.Minute)
	require.Equal(t, http.StatusServiceUnavailable, h.hold(ev.ID, "zed", 1, "z-1").status)
	h.srv.WaitUncertainFinal()

	writer, err := pgx.Connect(ctx, h.dbURL)
	require.NoError(t, err)
	defer writer.Close(ctx)
	tx, err := writer.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "UPDATE holds SET updated_at = updated_at WHERE false")
	require.NoError(t, err)

	n, err := h.srv.ResolveUncertain(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "a write of the holds table is still open: not settled yet")
	assert.Equal(t, http.StatusCreated, h.hold(ev.ID, "amy", 1, "a-1").status, "hold writes go on meanwhile")

	require.NoError(t, tx.Commit(ctx))
	n, err = h.srv.ResolveUncertain(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	h.requireInvariant(ev.ID, 1)
}

// claimByDeadRequest plays a hold request of zed's (key z-1) that claimed
// its key and took a seat with the hold script, then died before writing
// its row.
func claimByDeadRequest(t *testing.T, h *harness, event int64, holdID string) {
	t.Helper()
	digest := idem.RequestDigest("quantity=1")
	claim := fmt.Sprintf(`{"digest":%q,"hold":%q,"at":%d}`, digest, holdID, h.clock.Now().UnixMilli())
	res, err := h.srv.Inventory().Hold(context.Background(), inventory.HoldRequest{
		Event: event, HoldID: holdID, User: "zed", Quantity: 1, Now: h.clock.Now(), ExpiresAt: h.clock.Now().Add(10 * time.Minute),
		KeyDigest: idem.KeyDigest("zed", "z-1"), BodyDigest: digest,
		Claim: "idem:" + hashtag.Event(event) + ":holds:" + idem.KeyDigest("zed", "z-1"), ClaimValue: claim, ClaimTTL: time.Hour,
	})
	require.NoError(t, err)
	require.Equal(t, inventory.Held, res.Outcome)
}

func holdID(t *testing.T, r result) string {
	t.Helper()
	var hj holdJSON
	r.json(t, &hj)
	return hj.HoldID
}

func dropIdempotencyRecords(t *testing.T, h *harness, event int64) {
	t.Helper()
	ctx := context.Background()
	pattern := "idem:" + hashtag.Event(event) + ":*"
	// On Redis Cluster, KEYS answers for one node: ask the master of the
	// event's slot, where every key of the event is.
	var node redis.Cmdable = h.rdb
	if c, ok := h.rdb.(*redis.ClusterClient); ok {
		var err error
		node, err = c.MasterForKey(ctx, pattern)
		require.NoError(t, err)
	}
	keys, err := node.Keys(ctx, pattern).Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	require.NoError(t, h.rdb.Del(ctx, keys...).Err())
}

func TestCreateEvent(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	valid := func(over map[string]any) map[string]any {
		m := map[string]any{"name": "Final", "capacity": 500, "price": 90000, "currency": "inr"}
		for k, v := range over {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	t.Run("defaults", func(t *testing.T) {
		h := h.with(t)
		res := h.do(http.MethodPost, "/v1/events", valid(nil), admin())
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
		var ev eventJSON
		res.json(t, &ev)
		assert.Positive(t, ev.ID, "an id is assigned")
		assert.Equal(t, eventJSON{ID: ev.ID, Name: "Final", Capacity: 500, Sellable: 490, Remaining: 490, Price: 90000,
			Currency: "inr", HoldTTLSeconds: 600, MaxPerUser: 4, OverflowReserve: 10}, ev)

		var list []eventJSON
		h.do(http.MethodGet, "/v1/events", nil, nil).json(t, &list)
		assert.Contains(t, list, ev)
	})
	reserve := []struct {
		capacity, pct, sellable int64
	}{
		{500, 2, 490}, {101, 2, 98}, {10, 2, 9}, {100, 0, 100}, {1, 2, 1}, {7, 100, 1},
	}
	for _, r := range reserve {
		t.Run(fmt.Sprintf("capacity %d overflow %d%%", r.capacity, r.pct), func(t *testing.T) {
			h := h.with(t)
			res := h.do(http.MethodPost, "/v1/events", valid(map[string]any{"capacity": r.capacity, "overflow_pct": r.pct}), admin())
			require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
			var ev eventJSON
			res.json(t, &ev)
			assert.Equal(t, r.sellable, ev.Sellable)
			assert.Equal(t, r.sellable, ev.Remaining, "Redis is loaded with sellable, never capacity")
			assert.Equal(t, r.capacity-r.sellable, ev.OverflowReserve)
		})
	}
	t.Run("explicit id, then a conflict", func(t *testing.T) {
		h := h.with(t)
		id := int64(7_000_000_000 + time.Now().UnixNano()%1_000_000)
		require.Equal(t, http.StatusCreated, h.do(http.MethodPost, "/v1/events", valid(map[string]any{"id": id}), admin()).status)
		res := h.do(http.MethodPost, "/v1/events", valid(map[string]any{"id": id}), admin())
		assert.Equal(t, http.StatusConflict, res.status)
		assert.Equal(t, "event_exists", res.errorCode(t))
	})
	bad := map[string]map[string]any{
		"no name":            {"name": nil},
		"empty name":         {"name": " "},
		"no capacity":        {"capacity": nil},
		"zero capacity":      {"capacity": 0},
		"negative price":     {"price": -1},
		"no price":           {"price": nil},
		"bad currency":       {"currency": "rupees"},
		"no currency":        {"currency": nil},
		"zero ttl":           {"hold_ttl_seconds": 0},
		"zero per user":      {"max_per_user": 0},
		"overflow over 100":  {"overflow_pct": 101},
		"negative overflow":  {"overflow_pct": -1},
		"negative id":        {"id": -4},
		"fractional seats":   {"capacity": 10.5},
		"capacity as string": {"capacity": "10"},
		"unknown field":      {"venue": "Wankhede"},
		"NUL in the name":    {"name": "Fi\x00nal"},
	}
	for name, over := range bad {
		t.Run(name, func(t *testing.T) {
			h := h.with(t)
			res := h.do(http.MethodPost, "/v1/events", valid(over), admin())
			assert.Equal(t, http.StatusBadRequest, res.status, "%s", res.body)
			assert.Equal(t, "invalid_request", res.errorCode(t))
		})
	}
	t.Run("an escaped backslash before u0000 is text", func(t *testing.T) {
		h := h.with(t)
		res := h.do(http.MethodPost, "/v1/events", valid(map[string]any{"name": `Fi\u0000nal`}), admin())
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
		var ev eventJSON
		res.json(t, &ev)
		assert.Equal(t, `Fi\u0000nal`, ev.Name)
	})
	t.Run("body not UTF-8", func(t *testing.T) {
		h := h.with(t)
		res := h.do(http.MethodPost, "/v1/events", "{\"name\":\"Fi\xffnal\",\"capacity\":5,\"price\":1,\"currency\":\"inr\"}", admin())
		assert.Equal(t, http.StatusBadRequest, res.status, "%s", res.body)
		assert.Equal(t, "invalid_request", res.errorCode(t))
	})
	t.Run("body over 64 KiB", func(t *testing.T) {
		h := h.with(t)
		res := h.do(http.MethodPost, "/v1/events", valid(map[string]any{"name": strings.Repeat("n", 70<<10)}), admin())
		assert.Equal(t, http.StatusRequestEntityTooLarge, res.status)
	})
}

func TestHealthAndMetrics(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(nil)
	h.hold(ev.ID, "ann", 1, "a")
	h.hold(ev.ID, "ann", 1, "b")
	h.invariant(ev.ID)

	assert.Equal(t, http.StatusOK, h.do(http.MethodGet, "/healthz", nil, nil).status)
	assert.Equal(t, http.StatusOK, h.do(http.MethodGet, "/readyz", nil, nil).status)
	res := h.do(http.MethodGet, "/metrics", nil, nil)
	require.Equal(t, http.StatusOK, res.status, "the contract's route (docs/api.md)")
	assert.Contains(t, res.header.Get("Content-Type"), "text/plain")
	assert.Equal(t, http.StatusMethodNotAllowed, h.do(http.MethodPost, "/metrics", nil, nil).status)
	body := string(res.body)
	for _, want := range []string{
		`waitroom_origin_holds_total{outcome="held"} 1`,
		`waitroom_origin_holds_total{outcome="already_held"} 1`,
		`waitroom_origin_hold_duration_seconds_count 2`,
		fmt.Sprintf(`waitroom_inventory_drift{event="%d"} 0`, ev.ID),
		"waitroom_origin_reaper_released_seats_total 0",
	} {
		assert.Contains(t, body, want)
	}
}

// TestMetricsApart: with an address of their own (ORIGIN_METRICS_ADDR) the
// metrics leave the API, for a site whose public routes reach the origin.
func TestMetricsApart(t *testing.T) {
	h := newHarness(t, harnessOptions{config: func(c *origin.Config) { c.MetricsApart = true }})
	assert.Equal(t, http.StatusNotFound, h.do(http.MethodGet, "/metrics", nil, nil).status)
	res := h.metrics()
	require.Equal(t, http.StatusOK, res.status)
	assert.Contains(t, string(res.body), "waitroom_origin_hold_duration_seconds")
}

func TestMigrationsRunOnceConcurrently(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	var before int
	require.NoError(t, h.ledger.Pool().QueryRow(context.Background(), `SELECT count(*) FROM schema_migrations`).Scan(&before))
	require.Positive(t, before)
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			l, err := ledger.Open(context.Background(), h.dbURL, ledger.Options{MaxConns: 2})
			if err == nil {
				l.Close()
			}
			errs <- err
		}()
	}
	for range 3 {
		assert.NoError(t, <-errs)
	}
	var n int
	require.NoError(t, h.ledger.Pool().QueryRow(context.Background(), `SELECT count(*) FROM schema_migrations`).Scan(&n))
	assert.Equal(t, before, n, "each migration applied once")
}

// The Idempotency-Key is 1 to 255 characters (docs/api.md §8), counted as
// characters, not bytes: a key of 200 two-byte characters is accepted, on
// holds and bookings alike.
func TestIdempotencyKeyLengthCountsCharacters(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 5})
	key := strings.Repeat("é", 200)
	require.Greater(t, len(key), origin.MaxIdempotencyKeyLen)
	res := h.hold(ev.ID, "ann", 1, key)
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	var hj holdJSON
	res.json(t, &hj)
	book := h.book(ev.ID, "ann", hj.HoldID, payment.MethodVisa, key)
	assert.Equal(t, http.StatusAccepted, book.status, "%s", book.body)
}
