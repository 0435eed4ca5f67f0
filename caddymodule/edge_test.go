package caddymodule

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/edge/cloudflare"
	"github.com/waitroom/waitroom/waitroom"
)

func TestUnmarshalCloudflareKV(t *testing.T) {
	for _, c := range []struct {
		name  string
		input string
		want  *CloudflareKV
		err   string
	}{
		{
			name: "every setting",
			input: `waitroom {
				cloudflare_kv {
					account_id {env.CF_ACCOUNT_ID}
					namespace_id 0f2ac74b498b48028cb68387c421e279
					api_token {env.CF_API_TOKEN}
					api_url http://127.0.0.1:9999/client/v4/
					debounce 3s
				}
			}`,
			want: &CloudflareKV{AccountID: "{env.CF_ACCOUNT_ID}", NamespaceID: "0f2ac74b498b48028cb68387c421e279",
				APIToken: "{env.CF_API_TOKEN}", APIURL: "http://127.0.0.1:9999/client/v4/", Debounce: caddy.Duration(3 * time.Second)},
		},
		{name: "arguments", input: "waitroom {\n cloudflare_kv abc\n}", err: "cloudflare_kv takes its settings in a block"},
		{name: "unknown setting", input: "waitroom {\n cloudflare_kv {\n zone x\n }\n}", err: `unrecognized cloudflare_kv subdirective "zone"`},
		{name: "two tokens", input: "waitroom {\n cloudflare_kv {\n api_token a b\n }\n}", err: "cloudflare_kv: api_token: want exactly one argument"},
		{name: "bad debounce", input: "waitroom {\n cloudflare_kv {\n debounce soon\n }\n}", err: `cloudflare_kv: debounce: "soon" is not a duration`},
		{name: "settings after the block", input: "waitroom {\n cloudflare_kv {\n account_id a\n }\n event 9\n}", want: &CloudflareKV{AccountID: "a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(c.input))
			if c.err != "" {
				assert.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, h.CloudflareKV)
		})
	}
}

func TestCloudflareKVIsValidated(t *testing.T) {
	full := CloudflareKV{AccountID: "a", NamespaceID: "n", APIToken: "{env.WAITROOM_TEST_UNSET_TOKEN}"}
	for name, c := range map[string]struct {
		edit func(*CloudflareKV)
		want string
	}{
		"no account":     {func(c *CloudflareKV) { c.AccountID = "" }, "cloudflare_kv: account_id is required"},
		"no namespace":   {func(c *CloudflareKV) { c.NamespaceID = "" }, "cloudflare_kv: namespace_id is required"},
		"no token":       {func(c *CloudflareKV) { c.APIToken = "" }, "cloudflare_kv: api_token is required"},
		"token unset":    {func(*CloudflareKV) {}, "cloudflare_kv: api_token is required once placeholders are replaced"},
		"negative delay": {func(c *CloudflareKV) { c.Debounce = -1 }, "cloudflare_kv: debounce must not be negative"},
	} {
		t.Run(name, func(t *testing.T) {
			kv := full
			c.edit(&kv)
			h := &Handler{Event: 1, Keys: []Key{{ID: "k1", Secret: testSecret}}, CloudflareKV: &kv}
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			err := h.Provision(ctx)
			assert.ErrorContains(t, err, c.want)
			assert.Nil(t, h.room, "a refused config holds no room")
		})
	}
}

// kvStandIn is the Workers KV write of the Cloudflare API: it checks the
// request and hands every state written to the test.
func kvStandIn(t *testing.T) (url string, written <-chan cloudflare.State) {
	ch := make(chan cloudflare.State, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, http.MethodPut, r.Method)
		assert.Equal(t, "Bearer cf-test-token", r.Header.Get("Authorization"))
		var st cloudflare.State
		if assert.NoError(t, r.ParseMultipartForm(1<<20)) {
			assert.NoError(t, json.Unmarshal([]byte(r.FormValue("value")), &st))
		}
		assert.Equal(t, fmt.Sprintf("/client/v4/accounts/acct/storage/kv/namespaces/ns/values/%s", cloudflare.Key(st.Event)), r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"success":true,"errors":[],"messages":[],"result":{}}`))
		ch <- st
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/client/v4/", ch
}

func TestStateChangesReachWorkersKV(t *testing.T) {
	url, written := kvStandIn(t)
	t.Setenv("WAITROOM_TEST_CF_TOKEN", "cf-test-token")
	h := provision(t, &Handler{Watermark: 10, HardCap: 500, SoldOutMaxAge: caddy.Duration(30 * time.Second),
		Keys: []Key{{ID: "k2", Secret: testSecret + "-new"}, {ID: "k1", Secret: testSecret}},
		CloudflareKV: &CloudflareKV{AccountID: "acct", NamespaceID: "ns", APIToken: "{env.WAITROOM_TEST_CF_TOKEN}",
			APIURL: url, Debounce: caddy.Duration(time.Millisecond)}})

	next := func() cloudflare.State {
		t.Helper()
		select {
		case st := <-written:
			return st
		case <-time.After(10 * time.Second):
			t.Fatal("no state reached the stand-in")
			return cloudflare.State{}
		}
	}
	first := next()
	assert.Equal(t, cloudflare.State{Version: cloudflare.Version, Event: h.Event, Watermark: 10, HardCap: 500,
		KeyIDs: []string{"k2", "k1"}, SoldOutMaxAge: 30, Languages: []string{"en", "de", "es", "ja"},
		KeyChecks: map[string]string{
			"k2": waitroom.KeyCheck([]byte(testSecret + "-new")), "k1": waitroom.KeyCheck([]byte(testSecret)),
		},
		SoldOutPages: first.SoldOutPages}, first, "the state as the room first read it, with its keys' checks, never a secret")
	for _, c := range first.KeyChecks {
		assert.NotContains(t, c, testSecret)
	}
	// The gateway's own page, in each of its languages.
	for _, lang := range first.Languages {
		r := httptest.NewRequest(http.MethodGet, "http://tickets.test/?lang="+lang, nil)
		page, err := h.page(httptest.NewRecorder(), r)
		require.NoError(t, err)
		var b bytes.Buffer
		require.NoError(t, h.soldOutPage.Execute(&b, SoldOutPage{Page: page, Event: h.Event}))
		assert.Equal(t, b.String(), first.SoldOutPages[lang], lang)
	}
	assert.Contains(t, first.SoldOutPages["de"], `lang="de"`)

	update(t, h, waitroom.Change{SetWatermark: ptr(int64(70)), SoldOut: ptr(true)})
	for st := next(); !st.SoldOut; st = next() {
		// A poll may have caught the change half done: only the last
		// write counts.
	}
	// Requests go on meanwhile, and the handler answers from memory.
	res := serve(t, h, get(h, ""))
	assert.Equal(t, http.StatusGone, res.rec.Code)
}

func TestEdgeStopsWithTheConfig(t *testing.T) {
	url, written := kvStandIn(t)
	h := &Handler{Event: 777_001, Keys: []Key{{ID: "k1", Secret: testSecret}},
		CloudflareKV: &CloudflareKV{AccountID: "acct", NamespaceID: "ns", APIToken: "cf-test-token", APIURL: url, Debounce: caddy.Duration(time.Millisecond)}}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	require.NoError(t, h.Provision(ctx))
	<-written
	require.NoError(t, h.Cleanup())
	// Cleanup waited for the publisher: nothing more is written.
	other := provision(t, &Handler{Event: h.Event})
	update(t, other, waitroom.Change{SoldOut: ptr(true)})
	select {
	case st := <-written:
		t.Fatalf("a stopped publisher wrote %+v", st)
	default:
	}
}

var updateVerdicts = flag.Bool("update-verdicts", false, "rewrite the edge's verdict table, edge/cloudflare/testdata/verdicts.json")

// verdictsFile is the table of verdicts the Worker's tests check it
// against (edge/cloudflare/worker/test).
const verdictsFile = "../edge/cloudflare/testdata/verdicts.json"

// verdicts is the table: how the gateway's key set judges tokens, and how
// the handler answers requests, at a fixed time.
type verdicts struct {
	Note string `json:"note"`
	// Now is the time of every verdict, in milliseconds since the epoch.
	Now int64 `json:"now_ms"`
	// Keys is the gateway's key set, the Worker's WAITROOM_KEYS secret.
	Keys string `json:"keys"`
	// SoldOutPages is the sold_out_pages of every row's state, kept once.
	SoldOutPages map[string]string `json:"sold_out_pages"`
	Tokens       []tokenVerdict    `json:"tokens"`
	Requests     []request         `json:"requests"`
}

type tokenVerdict struct {
	Name  string `json:"name"`
	Event int64  `json:"event"`
	Token string `json:"token"`
	// Valid is whether VerifyAny accepts the token; the rest is what it
	// says when it does.
	Valid    bool   `json:"valid"`
	PreQueue bool   `json:"pre_queue,omitempty"`
	Subject  string `json:"subject,omitempty"`
	Position int64  `json:"position,omitempty"`
}

type request struct {
	Name string `json:"name"`
	// State is the event's KV value as the gateway publishes it, but for
	// its sold_out_pages, the table's.
	State cloudflare.State `json:"state"`
	// Path is the request's path and query.
	Path           string `json:"path"`
	Accept         string `json:"accept,omitempty"`
	AcceptLanguage string `json:"accept_language,omitempty"`
	// LangCookie is the waitroom_lang cookie, sent after the token
	// cookies.
	LangCookie  string   `json:"lang_cookie,omitempty"`
	HeaderToken string   `json:"header_token,omitempty"`
	Cookies     []string `json:"cookies,omitempty"`
	Gateway     answer   `json:"gateway"`
}

// answer is what the handler did with a request: passed it on to the next
// handler, or answered it itself (then with these headers and, for a 410,
// this body).
type answer struct {
	PassedOn     bool   `json:"passed_on"`
	Status       int    `json:"status"`
	WaitroomStat string `json:"x_waitroom_status"`
	CacheControl string `json:"cache_control,omitempty"`
	Vary         string `json:"vary,omitempty"`
	ContentType  string `json:"content_type,omitempty"`
	// ContentLanguage is the language of an HTML 410.
	ContentLanguage string `json:"content_language,omitempty"`
	Body            string `json:"body,omitempty"`
}

// The fixed time of the table and its keys: k2 signs, k1 is the key
// rotated out that still verifies.
var (
	verdictTime = time.Date(2030, 1, 31, 10, 0, 0, 0, time.UTC)
	verdictKeys = "k2:" + testSecret + "-k2,k1:" + testSecret + "-k1"
)

// TestEdgeVerdictTable checks the committed table against the gateway: every
// token verdict is the key set's, every answer the handler's. With
// -update-verdicts it writes the table instead.
func TestEdgeVerdictTable(t *testing.T) {
	keys, err := waitroom.ParseKeys(verdictKeys)
	require.NoError(t, err)
	got := verdicts{
		Note: "Generated by `go test ./caddymodule -run TestEdgeVerdictTable -update-verdicts`; checked against the gateway by that test " +
			"and against the Worker by `make test-edge`.",
		Now:  verdictTime.UnixMilli(),
		Keys: verdictKeys,
	}
	got.Tokens = tokenVerdicts(t, keys)
	got.SoldOutPages, got.Requests = requestVerdicts(t, keys)
	body, err := json.MarshalIndent(got, "", "  ")
	require.NoError(t, err)
	body = append(body, '\n')
	if *updateVerdicts {
		require.NoError(t, os.WriteFile(verdictsFile, body, 0o644))
		return
	}
	want, err := os.ReadFile(verdictsFile)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(body), "the gateway's verdicts changed: run the test with -update-verdicts, then make test-edge")
}

// issuer signs tokens at a time relative to the table's.
func issuer(t *testing.T, keys []waitroom.Key, at time.Duration) *waitroom.KeySet {
	t.Helper()
	ks, err := waitroom.NewKeySet(func() time.Time { return verdictTime.Add(at) }, keys...)
	require.NoError(t, err)
	return ks
}

func issue(t *testing.T, ks *waitroom.KeySet, event, pos int64, ttl time.Duration) string {
	t.Helper()
	tk, err := ks.Issue("v_0123456789abcdef", event, pos, ttl)
	require.NoError(t, err)
	return tk.Raw
}

// signRaw signs a token whose header and payload are given as JSON text, so
// the table can hold what the gateway would never issue.
func signRaw(header, payload, secret string) string {
	enc := base64.RawURLEncoding
	in := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload))
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(in))
	return in + "." + enc.EncodeToString(mac.Sum(nil))
}

func tokenVerdicts(t *testing.T, keys []waitroom.Key) []tokenVerdict {
	const event = 42
	k2, k1 := string(keys[0].Secret), string(keys[1].Secret)
	now := verdictTime.Unix()
	claims := func(extra string) string {
		return fmt.Sprintf(`{"iss":"waitroom","sub":"v_0123456789abcdef","evt":42,"pos":7,"iat":%d,"exp":%d%s}`, now-60, now+1800, extra)
	}
	hs256 := func(kid string) string { return `{"alg":"HS256","kid":"` + kid + `","typ":"JWT"}` }
	valid := issue(t, issuer(t, keys, -time.Minute), event, 7, 30*time.Minute)
	parts := strings.Split(valid, ".")
	otherSig := strings.Split(issue(t, issuer(t, keys, -time.Minute), event, 8, 30*time.Minute), ".")[2]
	pre, err := issuer(t, keys, -time.Minute).IssuePreQueue("v_0123456789abcdef", event, verdictTime.Add(time.Hour))
	require.NoError(t, err)

	rows := []struct{ name, token string }{
		{"issued by the gateway", valid},
		{"signed with the key rotated out", issue(t, issuer(t, []waitroom.Key{keys[1]}, -time.Minute), event, 7, 30*time.Minute)},
		{"position 1", issue(t, issuer(t, keys, 0), event, 1, time.Minute)},
		{"a large position", issue(t, issuer(t, keys, 0), event, 9_007_199_254_740_991, time.Minute)},
		{"a pre-queue token", pre.Raw},
		{"another event", issue(t, issuer(t, keys, -time.Minute), 43, 7, 30*time.Minute)},
		{"expired 10s ago", issue(t, issuer(t, keys, -time.Hour), event, 7, time.Hour-10*time.Second)},
		{"expired 5s ago (the leeway's end)", issue(t, issuer(t, keys, -time.Hour), event, 7, time.Hour-5*time.Second)},
		{"expired 4s ago (within the leeway)", issue(t, issuer(t, keys, -time.Hour), event, 7, time.Hour-4*time.Second)},
		{"issued 6s ahead", issue(t, issuer(t, keys, 6*time.Second), event, 7, time.Hour)},
		{"issued 5s ahead (within the leeway)", issue(t, issuer(t, keys, 5*time.Second), event, 7, time.Hour)},
		{"exp a fraction within the leeway", signRaw(hs256("k2"), fmt.Sprintf(`{"iss":"waitroom","sub":"v_0123456789abcdef","evt":42,"pos":7,"iat":%d,"exp":%d.1}`, now-60, now-4), k2)},
		{"iat as a fraction", signRaw(hs256("k2"), fmt.Sprintf(`{"iss":"waitroom","sub":"v_0123456789abcdef","evt":42,"pos":7,"iat":%d.9,"exp":%d}`, now+5, now+60), k2)},
		{"exp a fraction past the leeway", signRaw(hs256("k2"), fmt.Sprintf(`{"iss":"waitroom","sub":"v_0123456789abcdef","evt":42,"pos":7,"iat":%d,"exp":%d.9}`, now-60, now-5), k2)},
		{"not before, in a minute", signRaw(hs256("k2"), claims(fmt.Sprintf(`,"nbf":%d`, now+60)), k2)},
		{"not before, 5s ahead", signRaw(hs256("k2"), claims(fmt.Sprintf(`,"nbf":%d`, now+5)), k2)},
		{"an audience", signRaw(hs256("k2"), claims(`,"aud":["tickets"],"jti":"x"`), k2)},
		{"unknown claims", signRaw(hs256("k2"), claims(`,"role":"admin"`), k2)},
		{"exp with a zero fraction", signRaw(hs256("k2"), fmt.Sprintf(`{"iss":"waitroom","sub":"v_0123456789abcdef","evt":42,"pos":7,"iat":%d,"exp":%d.0}`, now-60, now+60), k2)},
		{"exp in exponent form", signRaw(hs256("k2"), fmt.Sprintf(`{"iss":"waitroom","sub":"v_0123456789abcdef","evt":42,"pos":7,"iat":%d,"exp":%d0e-1}`, now-60, now+60), k2)},
		{"exp as a numeric string", signRaw(hs256("k2"), fmt.Sprintf(`{"iss":"waitroom","sub":"v_0123456789abcdef","evt":42,"pos":7,"iat":%d,"exp":"%d"}`, now-60, now+60), k2)},
		{"evt as a string", signRaw(hs256("k2"), fmt.Sprintf(`{"iss":"waitroom","sub":"v_0123456789abcdef","evt":"42","pos":7,"iat":%d,"exp":%d}`, now-60, now+60), k2)},
		{"pos 0", signRaw(hs256("k2"), fmt.Sprintf(`{"iss":"waitroom","sub":"v_0123456789abcdef","evt":42,"pos":0,"iat":%d,"exp":%d}`, now-60, now+60), k2)},
		{"negative pos", signRaw(hs256("k2"), fmt.Sprintf(`{"iss":"waitroom","sub":"v_0123456789abcdef","evt":42,"pos":-3,"iat":%d,"exp":%d}`, now-60, now+60), k2)},
		{"pre false with a position", signRaw(hs256("k2"), claims(`,"pre":false`), k2)},
		{"pre not a boolean", signRaw(hs256("k2"), claims(`,"pre":"no"`), k2)},
		{"pre-queue with a position", signRaw(hs256("k2"), claims(`,"pre":true`), k2)},
		{"no sub", signRaw(hs256("k2"), fmt.Sprintf(`{"iss":"waitroom","evt":42,"pos":7,"iat":%d,"exp":%d}`, now-60, now+60), k2)},
		{"sub a number", signRaw(hs256("k2"), fmt.Sprintf(`{"iss":"waitroom","sub":12,"evt":42,"pos":7,"iat":%d,"exp":%d}`, now-60, now+60), k2)},
		{"no iat", signRaw(hs256("k2"), fmt.Sprintf(`{"iss":"waitroom","sub":"v_0123456789abcdef","evt":42,"pos":7,"exp":%d}`, now+60), k2)},
		{"no exp", signRaw(hs256("k2"), fmt.Sprintf(`{"iss":"waitroom","sub":"v_0123456789abcdef","evt":42,"pos":7,"iat":%d}`, now-60), k2)},
		{"exp null", signRaw(hs256("k2"), fmt.Sprintf(`{"iss":"waitroom","sub":"v_0123456789abcdef","evt":42,"pos":7,"iat":%d,"exp":null}`, now-60), k2)},
		{"another issuer", signRaw(hs256("k2"), fmt.Sprintf(`{"iss":"someone","sub":"v_0123456789abcdef","evt":42,"pos":7,"iat":%d,"exp":%d}`, now-60, now+60), k2)},
		{"no issuer", signRaw(hs256("k2"), fmt.Sprintf(`{"sub":"v_0123456789abcdef","evt":42,"pos":7,"iat":%d,"exp":%d}`, now-60, now+60), k2)},
		{"kid of the old key, signed with the new", signRaw(hs256("k1"), claims(""), k2)},
		{"signed with k1's secret under k1", signRaw(hs256("k1"), claims(""), k1)},
		{"an unknown kid", signRaw(hs256("k9"), claims(""), k2)},
		{"no kid", signRaw(`{"alg":"HS256","typ":"JWT"}`, claims(""), k2)},
		{"kid a number", signRaw(`{"alg":"HS256","kid":2}`, claims(""), k2)},
		{"forged: another secret", signRaw(hs256("k2"), claims(""), "an-attacker-secret-of-32-bytes-or-more")},
		{"forged: the position raised", parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(claims(`,"pos":1`))) + "." + parts[2]},
		{"forged: another token's signature", parts[0] + "." + parts[1] + "." + otherSig},
		{"alg none", base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"k2"}`)) + "." + parts[1] + "."},
		{"alg HS512", signRaw(`{"alg":"HS512","kid":"k2"}`, claims(""), k2)},
		{"alg hs256 (lower case)", signRaw(`{"alg":"hs256","kid":"k2"}`, claims(""), k2)},
		{"no alg", signRaw(`{"kid":"k2"}`, claims(""), k2)},
		{"padded", parts[0] + "." + parts[1] + "==." + parts[2]},
		{"standard base64", strings.NewReplacer("-", "+", "_", "/").Replace(valid)},
		{"a space inside", parts[0] + "." + parts[1][:5] + " " + parts[1][5:] + "." + parts[2]},
		{"two parts", parts[0] + "." + parts[1]},
		{"four parts", valid + "." + parts[2]},
		{"truncated signature", valid[:len(valid)-3]},
		{"empty signature", parts[0] + "." + parts[1] + "."},
		{"payload not JSON", parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte("waitroom")) + "." + parts[2]},
		{"payload a JSON array, signed", signRaw(hs256("k2"), `[1,2]`, k2)},
		{"header not JSON, signed", signRaw(`kid=k2`, claims(""), k2)},
		{"garbage", "not-a-token"},
		{"empty", ""},
	}
	out := make([]tokenVerdict, 0, len(rows))
	for _, r := range rows {
		// A key set of its own per token: the verdict is the signature's
		// and the claims', never a cache's.
		ks, err := waitroom.NewKeySet(func() time.Time { return verdictTime }, keys...)
		require.NoError(t, err)
		v := tokenVerdict{Name: r.name, Event: event, Token: r.token}
		if tk, err := ks.VerifyAny(r.token, event); err == nil {
			v.Valid, v.PreQueue, v.Subject, v.Position = true, tk.PreQueue, tk.Subject, tk.Position
		}
		out = append(out, v)
	}
	return out
}

func requestVerdicts(t *testing.T, keys []waitroom.Key) (soldOutPages map[string]string, rows []request) {
	held := &waitroom.Inventory{Sellable: 10, Held: 3, Confirmed: 7, Healthy: true}
	bought := &waitroom.Inventory{Sellable: 10, Confirmed: 10, Healthy: true}
	origin := waitroom.Change{SoldOut: ptr(true), Actor: waitroom.ActorOrigin}
	states := []struct {
		name string
		c    waitroom.Change
		// inv is the origin's figures, published before the request.
		inv    *waitroom.Inventory
		atZero bool
	}{
		{name: "open", c: waitroom.Change{}},
		{name: "sold out", c: waitroom.Change{SoldOut: ptr(true)}},
		{name: "sold out and paused", c: waitroom.Change{SoldOut: ptr(true), Paused: ptr(true)}},
		{name: "paused", c: waitroom.Change{Paused: ptr(true)}},
		{name: "hard cap 20", c: waitroom.Change{HardCap: ptr(int64(20))}},
		{name: "sold out, hard cap 20", c: waitroom.Change{SoldOut: ptr(true), HardCap: ptr(int64(20))}},
		{name: "all held (the origin's flag, 3 seats held)", c: origin, inv: held},
		{name: "sold out by the origin, nothing held", c: origin, inv: bought},
		{name: "all held, sold_out_at_zero", c: origin, inv: held, atZero: true},
		{name: "sold out by an operator, 3 seats held", c: waitroom.Change{SoldOut: ptr(true), Actor: ActorAdmin}, inv: held},
	}
	type carry struct {
		name    string
		header  func(event int64) string
		cookies func(event int64) []string
		// html adds a row asking for the HTML page.
		html bool
		// Only for an HTML row: the path, and the language asked for.
		path, acceptLanguage, langCookie string
	}
	ks := issuer(t, keys, -time.Minute)
	at := func(pos int64) func(int64) string {
		return func(event int64) string { return issue(t, ks, event, pos, 30*time.Minute) }
	}
	forged := func(event int64) string {
		return signRaw(`{"alg":"HS256","kid":"k2"}`, fmt.Sprintf(`{"iss":"waitroom","sub":"v_1","evt":%d,"pos":1,"iat":%d,"exp":%d}`,
			event, verdictTime.Unix()-60, verdictTime.Unix()+600), "an-attacker-secret-of-32-bytes-or-more")
	}
	expired := func(event int64) string { return issue(t, issuer(t, keys, -time.Hour), event, 5, 30*time.Minute) }
	preQueue := func(event int64) string {
		tk, err := ks.IssuePreQueue("v_0123456789abcdef", event, verdictTime.Add(time.Hour))
		require.NoError(t, err)
		return tk.Raw
	}
	oldKey := func(event int64) string {
		return issue(t, issuer(t, keys[1:], -time.Minute), event, 5, 30*time.Minute)
	}
	cookie := func(f func(int64) string) func(int64) []string {
		return func(event int64) []string { return []string{f(event)} }
	}
	carries := []carry{
		{name: "no token", html: true},
		{name: "admitted (pos 5), cookie", cookies: cookie(at(5)), html: true},
		{name: "admitted (pos 10, the watermark), header", header: at(10)},
		{name: "waiting (pos 11), cookie", cookies: cookie(at(11)), html: true},
		{name: "waiting (pos 11), header", header: at(11)},
		{name: "past the hard cap (pos 25), cookie", cookies: cookie(at(25))},
		{name: "admitted with the old key, cookie", cookies: cookie(oldKey)},
		{name: "forged, cookie", cookies: cookie(forged)},
		{name: "forged, header", header: forged},
		{name: "expired, cookie", cookies: cookie(expired)},
		{name: "another event's, cookie", cookies: func(event int64) []string { return []string{at(5)(event + 1)} }},
		{name: "pre-queue, cookie", cookies: cookie(preQueue)},
		{name: "empty cookie", cookies: func(int64) []string { return []string{""} }},
		{name: "forged header, admitted cookie", header: forged, cookies: cookie(at(5))},
		{name: "forged cookie, then an admitted one", cookies: func(event int64) []string { return []string{forged(event), at(5)(event)} }},
		{name: "the old key's waiting token, then an admitted one", cookies: func(event int64) []string {
			return []string{issue(t, issuer(t, keys[1:], -time.Minute), event, 11, 30*time.Minute), at(5)(event)}
		}},
		{name: "a value longer than a token", cookies: func(int64) []string { return []string{strings.Repeat("a", 5000)} }},
		{name: "five forged cookies, then an admitted one", cookies: func(event int64) []string {
			return []string{forged(event), forged(event), forged(event), forged(event), forged(event), at(5)(event)}
		}},
		{name: "pre-queue header, waiting cookie", header: preQueue, cookies: cookie(at(11))},
	}
	// The sold-out page's language, as the gateway chooses it.
	languages := []carry{
		{name: "German", acceptLanguage: "de"},
		{name: "German, else English", acceptLanguage: "de, en;q=0.8"},
		{name: "English, else German", acceptLanguage: "en;q=0.7, de;q=0.3"},
		{name: "Japanese by weight", acceptLanguage: "en;q=0.2, ja"},
		{name: "upper case", acceptLanguage: "ES"},
		{name: "a browser's English", acceptLanguage: "en-US,en;q=0.9"},
		{name: "a browser's German", acceptLanguage: "de-DE,de;q=0.9,en;q=0.8"},
		{name: "British English", acceptLanguage: "en-GB"},
		{name: "Latin American Spanish", acceptLanguage: "es-419,es;q=0.9"},
		{name: "Japan's Japanese", acceptLanguage: "ja-JP"},
		{name: "Swiss German, else English", acceptLanguage: "de-CH, en"},
		{name: "US English, else German", acceptLanguage: "en-US, de;q=0.5"},
		{name: "lower weight first", acceptLanguage: "de;q=0.4, es;q=0.6"},
		{name: "Swiss German", acceptLanguage: "de-CH, de;q=0.9"},
		{name: "Mexican Spanish", acceptLanguage: "es-MX"},
		{name: "French only", acceptLanguage: "fr"},
		{name: "French, else German", acceptLanguage: "fr, de;q=0.5"},
		{name: "any", acceptLanguage: "*"},
		{name: "malformed", acceptLanguage: ";;q=x"},
		{name: "?lang=ja", path: "/buy?lang=ja", acceptLanguage: "de"},
		{name: "?lang=fr", path: "/buy?lang=fr", acceptLanguage: "de"},
		{name: "?lang=de-AT", path: "/buy?lang=de-AT"},
		{name: "the language cookie", langCookie: "es", acceptLanguage: "de"},
		{name: "?lang= over the cookie", path: "/buy?lang=de", langCookie: "es"},
		{name: "another path", path: "/events/42/seats"},
		{name: "a query", path: "/buy?seat=12"},
		{name: "waiting (pos 11), German", acceptLanguage: "de", cookies: cookie(at(11))},
	}
	for i := range languages {
		languages[i].name = "language: " + languages[i].name
		languages[i].html = true
	}
	event := int64(420_000)
	for _, s := range states {
		all := carries
		if s.name == "sold out" {
			all = append(slices.Clone(carries), languages...)
		}
		for _, c := range all {
			var accepts []string
			if c.path == "" && c.acceptLanguage == "" && c.langCookie == "" {
				accepts = []string{"application/json"}
			}
			if c.html {
				accepts = append(accepts, "text/html,application/xhtml+xml")
			}
			for _, accept := range accepts {
				event++
				h := &Handler{Event: event, Watermark: 10, SoldOutAtZero: s.atZero, now: func() time.Time { return verdictTime }}
				for _, k := range keys {
					h.Keys = append(h.Keys, Key{ID: k.ID, Secret: string(k.Secret)})
				}
				provision(t, h)
				st := update(t, h, s.c)
				if s.inv != nil {
					require.NoError(t, h.room.room.PublishInventory(t.Context(), *s.inv))
				}
				page, err := h.edgePage()
				require.NoError(t, err)
				if soldOutPages == nil {
					soldOutPages = page.SoldOutPages
				}
				require.Equal(t, soldOutPages, page.SoldOutPages, "one set of pages for every row")
				page.SoldOutPages = nil
				row := request{Name: s.name + " / " + c.name + " / " + strings.Split(accept, "/")[1], Accept: accept,
					State: cloudflare.StateOf(st, h.availability(st), page), Path: cmp.Or(c.path, "/buy"), AcceptLanguage: c.acceptLanguage, LangCookie: c.langCookie}
				if c.header != nil {
					row.HeaderToken = c.header(event)
				}
				if c.cookies != nil {
					row.Cookies = c.cookies(event)
				}
				r := httptest.NewRequest(http.MethodGet, "http://tickets.test"+row.Path, nil)
				r.Header.Set("Accept", accept)
				if row.AcceptLanguage != "" {
					r.Header.Set("Accept-Language", row.AcceptLanguage)
				}
				if row.HeaderToken != "" {
					r.Header.Set(HeaderToken, row.HeaderToken)
				}
				for _, v := range row.Cookies {
					r.AddCookie(&http.Cookie{Name: h.cookieName, Value: v})
				}
				if row.LangCookie != "" {
					r.AddCookie(&http.Cookie{Name: langCookie, Value: row.LangCookie})
				}
				res := serve(t, h, r)
				a := answer{PassedOn: res.next != nil, Status: res.rec.Code, WaitroomStat: res.status()}
				if a.Status == http.StatusGone {
					hdr := res.rec.Header()
					a.CacheControl, a.Vary, a.ContentType = hdr.Get("Cache-Control"), strings.Join(hdr.Values("Vary"), ", "), hdr.Get("Content-Type")
					a.ContentLanguage, a.Body = hdr.Get("Content-Language"), res.rec.Body.String()
				}
				row.Gateway = a
				rows = append(rows, row)
			}
		}
	}
	return soldOutPages, rows
}
