package waitroom

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

var (
	secretA = []byte("a-secret-that-is-at-least-32-bytes-long")
	secretB = []byte("b-secret-that-is-at-least-32-bytes-long")
)

// fakeClock is a settable clock for tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)} }

// readyRoom is a room of a new event on s, on the clock, that read the
// store's state and waited out a new event's restore window: it hands out
// positions.
func readyRoom(t *testing.T, s Store, clock *fakeClock, opts RoomOptions) *Room {
	t.Helper()
	opts.Now = clock.Now
	r := NewRoom(s, testenv.EventID(), opts)
	_, err := r.Refresh(context.Background())
	require.NoError(t, err)
	clock.Advance(2 * time.Second)
	_, err = r.Refresh(context.Background())
	require.NoError(t, err)
	return r
}

// clockedStores makes each kind of store on a test's clock, by name.
func clockedStores(t *testing.T) map[string]func(*fakeClock) Store {
	return map[string]func(*fakeClock) Store{
		"memory": func(c *fakeClock) Store { return NewMemoryStore(c.Now) },
		"redis": func(c *fakeClock) Store {
			return NewRedisStore(testenv.Redis(t), RedisOptions{Now: c.Now})
		},
	}
}

func mustKeySet(t testing.TB, now func() time.Time, keys ...Key) *KeySet {
	t.Helper()
	ks, err := NewKeySet(now, keys...)
	require.NoError(t, err)
	return ks
}

func TestNewKeySetRefusesBadKeys(t *testing.T) {
	tests := []struct {
		name string
		keys []Key
		want string
	}{
		{"none", nil, "no signing key"},
		{"short secret", []Key{{ID: "k1", Secret: []byte("short")}}, "at least 32"},
		{"31 bytes", []Key{{ID: "k1", Secret: []byte(strings.Repeat("x", 31))}}, "at least 32"},
		{"empty id", []Key{{ID: "", Secret: secretA}}, "empty key id"},
		{"duplicate id", []Key{{ID: "k1", Secret: secretA}, {ID: "k1", Secret: secretB}}, "duplicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewKeySet(nil, tt.keys...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	_, err := NewKeySet(nil, Key{ID: "k1", Secret: []byte(strings.Repeat("x", 32))})
	assert.NoError(t, err, "32 bytes is enough")
}

func TestParseKeys(t *testing.T) {
	keys, err := ParseKeys("new:" + string(secretA) + ", old:" + string(secretB))
	require.NoError(t, err)
	require.Len(t, keys, 2)
	assert.Equal(t, "new", keys[0].ID)
	assert.Equal(t, secretB, keys[1].Secret)

	for _, bad := range []string{"", "nokey", ":secret", "kid:", "a:" + string(secretA) + ",,"} {
		_, err := ParseKeys(bad)
		assert.Error(t, err, "%q", bad)
	}
	// A colon inside the secret belongs to the secret.
	keys, err = ParseKeys("k:" + string(secretA) + ":more")
	require.NoError(t, err)
	assert.Equal(t, string(secretA)+":more", string(keys[0].Secret))
}

func TestIssueVerifyRoundTrip(t *testing.T) {
	clock := newClock()
	ks := mustKeySet(t, clock.Now, Key{ID: "k1", Secret: secretA})
	issued, err := ks.Issue("user-7", 42, 1234, 30*time.Minute)
	require.NoError(t, err)

	got, err := ks.Verify(issued.Raw, 42)
	require.NoError(t, err)
	assert.Equal(t, "user-7", got.Subject)
	assert.Equal(t, int64(42), got.Event)
	assert.Equal(t, int64(1234), got.Position)
	assert.Equal(t, clock.Now().Add(30*time.Minute), got.ExpiresAt)

	// The claims are the ones docs/api.md §2 names, with evt and pos as numbers.
	parts := strings.Split(issued.Raw, ".")
	require.Len(t, parts, 3)
	var header, claims map[string]any
	decodeSegment(t, parts[0], &header)
	decodeSegment(t, parts[1], &claims)
	assert.Equal(t, map[string]any{"alg": "HS256", "typ": "JWT", "kid": "k1"}, header)
	assert.Equal(t, "waitroom", claims["iss"])
	assert.Equal(t, "user-7", claims["sub"])
	assert.Equal(t, float64(42), claims["evt"])
	assert.Equal(t, float64(1234), claims["pos"])
	assert.Equal(t, float64(clock.Now().Unix()), claims["iat"])
	assert.Equal(t, float64(clock.Now().Add(30*time.Minute).Unix()), claims["exp"])
}

// The signer's tokens are byte for byte those the jwt library signs for the
// same claims and key: queue tokens, pre-queue ones, and subjects that JSON
// must escape.
func TestSignerMatchesJWT(t *testing.T) {
	clock := newClock()
	key := Key{ID: "k1", Secret: secretA}
	ks := mustKeySet(t, clock.Now, key)
	tests := []struct {
		name string
		t    Ticket
	}{
		{"queue token", Ticket{Subject: "v_abcdefghijklmnopqrstuv", Event: 42, Position: 123456}},
		{"pre-queue token", Ticket{Subject: "user-7", Event: 42, PreQueue: true}},
		{"subject to escape", Ticket{Subject: "a\"b<c>&\u2028é", Event: 1, Position: 1}},
		{"subject with a tab and a backslash", Ticket{Subject: "a\\d\te", Event: 7, Position: 9_000_000_000}},
		{"subject not UTF-8", Ticket{Subject: "a\xffb\u2029", Event: 1, Position: 1}},
		{"plain account id", Ticket{Subject: "user 7/a.b_c-d@example.com", Event: 8_000_000_123, Position: 1}},
		{"account's token", Ticket{Subject: "v_bob", Event: 42, Position: 3, Account: true}},
		{"account's pre-queue token", Ticket{Subject: "v_bob", Event: 42, PreQueue: true, Account: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.t.IssuedAt = clock.Now().UTC().Truncate(time.Second)
			tc.t.ExpiresAt = tc.t.IssuedAt.Add(30 * time.Minute)
			got, err := ks.issue(tc.t)
			require.NoError(t, err)

			tok := jwt.NewWithClaims(jwt.SigningMethodHS256, Claims{
				Event: tc.t.Event, Position: tc.t.Position, PreQueue: tc.t.PreQueue, Account: accountMark(tc.t.Account),
				RegisteredClaims: jwt.RegisteredClaims{Issuer: Issuer, Subject: tc.t.Subject,
					IssuedAt: jwt.NewNumericDate(tc.t.IssuedAt), ExpiresAt: jwt.NewNumericDate(tc.t.ExpiresAt)},
			})
			tok.Header["kid"] = key.ID
			want, err := tok.SignedString(key.Secret)
			require.NoError(t, err)
			assert.Equal(t, want, got.Raw)

			// And the parser takes it, past the cache of issued tokens.
			fresh := mustKeySet(t, clock.Now, key)
			v, err := fresh.VerifyAny(got.Raw, tc.t.Event)
			require.NoError(t, err)
			// A byte that is not UTF-8 is signed as U+FFFD, as
			// encoding/json writes it.
			assert.Equal(t, strings.ToValidUTF8(tc.t.Subject, "\uFFFD"), v.Subject)
			assert.Equal(t, tc.t.Position, v.Position)
			assert.Equal(t, tc.t.Account, v.Account)
		})
	}
}

// The acc mark, not the subject, tells an account's token; a token issued
// before the mark existed is an account's when its subject lacks the
// visitor prefix. No value of the claim makes a token invalid.
func TestAccountMark(t *testing.T) {
	clock := newClock()
	key := Key{ID: "k1", Secret: secretA}
	ks := mustKeySet(t, clock.Now, key)
	acc, err := ks.IssueAccount("v_bob", 42, 1, time.Hour)
	require.NoError(t, err)
	anon, err := ks.Issue(NewVisitorID(), 42, 2, time.Hour)
	require.NoError(t, err)
	legacy, err := ks.Issue("alice", 42, 3, time.Hour)
	require.NoError(t, err)
	for raw, want := range map[string]bool{acc.Raw: true, anon.Raw: false, legacy.Raw: true} {
		v, err := mustKeySet(t, clock.Now, key).Verify(raw, 42)
		require.NoError(t, err)
		assert.Equal(t, want, v.IsAccount(), v.Subject)
	}
	for _, odd := range []any{"true", 1, nil, map[string]any{}} {
		now := clock.Now()
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"evt": 42, "pos": 1, "acc": odd,
			"iss": Issuer, "sub": "v_x", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
		tok.Header["kid"] = key.ID
		raw, err := tok.SignedString(key.Secret)
		require.NoError(t, err)
		v, err := mustKeySet(t, clock.Now, key).Verify(raw, 42)
		require.NoError(t, err, "acc %v", odd)
		assert.False(t, v.IsAccount(), "acc %v", odd)
	}
}

func TestKeyRotation(t *testing.T) {
	clock := newClock()
	oldSet := mustKeySet(t, clock.Now, Key{ID: "old", Secret: secretA})
	rotated := mustKeySet(t, clock.Now, Key{ID: "new", Secret: secretB}, Key{ID: "old", Secret: secretA})
	retired := mustKeySet(t, clock.Now, Key{ID: "new", Secret: secretB})

	before, err := oldSet.Issue("u", 1, 5, time.Hour)
	require.NoError(t, err)
	_, err = rotated.Verify(before.Raw, 1)
	assert.NoError(t, err, "a token signed before the rotation still verifies")

	after, err := rotated.Issue("u", 1, 6, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, "new", rotated.SigningKeyID())
	_, err = oldSet.Verify(after.Raw, 1)
	assert.ErrorIs(t, err, ErrInvalidToken, "nodes that don't know the new key refuse it")
	_, err = retired.Verify(before.Raw, 1)
	assert.ErrorIs(t, err, ErrInvalidToken, "once the old key is retired its tokens are refused")
}

func TestVerifyRefusesBadTokens(t *testing.T) {
	clock := newClock()
	ks := mustKeySet(t, clock.Now, Key{ID: "k1", Secret: secretA})
	good, err := ks.Issue("user-7", 42, 100, 30*time.Minute)
	require.NoError(t, err)
	parts := strings.Split(good.Raw, ".")

	sign := func(method jwt.SigningMethod, key any, header map[string]any, claims jwt.MapClaims) string {
		tok := jwt.NewWithClaims(method, claims)
		for k, v := range header {
			tok.Header[k] = v
		}
		raw, err := tok.SignedString(key)
		require.NoError(t, err)
		return raw
	}
	claims := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"iss": "waitroom", "sub": "user-7", "evt": 42, "pos": 100,
			"iat": clock.Now().Unix(), "exp": clock.Now().Add(time.Hour).Unix()}
		if edit != nil {
			edit(c)
		}
		return c
	}
	kid := map[string]any{"kid": "k1"}
	// tamper re-encodes the payload with one claim changed, keeping the
	// original signature.
	tamper := func(claim string, value any) string {
		var c map[string]any
		decodeSegment(t, parts[1], &c)
		c[claim] = value
		b, err := json.Marshal(c)
		require.NoError(t, err)
		return parts[0] + "." + base64.RawURLEncoding.EncodeToString(b) + "." + parts[2]
	}
	noneToken := func() string {
		raw, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims(nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
		require.NoError(t, err)
		return raw
	}()
	// A token whose header says "none" but that carries an HMAC anyway.
	noneWithSig := func() string {
		h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"k1","typ":"JWT"}`))
		mac := hmac.New(sha256.New, secretA)
		mac.Write([]byte(h + "." + parts[1]))
		return h + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
	}()

	tests := []struct {
		name string
		raw  string
	}{
		{"empty", ""},
		{"garbage", "not a token"},
		{"two segments", parts[0] + "." + parts[1]},
		{"bad base64", parts[0] + ".@@@." + parts[2]},
		{"forged with another secret", sign(jwt.SigningMethodHS256, secretB, kid, claims(nil))},
		{"tampered pos", tamper("pos", 1)},
		{"tampered evt", tamper("evt", 43)},
		{"tampered sub", tamper("sub", "someone-else")},
		{"expired", sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) {
			c["exp"] = clock.Now().Add(-time.Minute).Unix()
		}))},
		{"no exp", sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) { delete(c, "exp") }))},
		{"no iat", sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) { delete(c, "iat") }))},
		{"issued in the future", sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) {
			c["iat"] = clock.Now().Add(time.Hour).Unix()
		}))},
		{"wrong issuer", sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) { c["iss"] = "other" }))},
		{"no sub", sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) { delete(c, "sub") }))},
		{"sub with a NUL", sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) { c["sub"] = "user\x007" }))},
		{"sub with a line break", sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) { c["sub"] = "user\r\nX-Other: 1" }))},
		{"sub with DEL", sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) { c["sub"] = "user\x7f" }))},
		{"pos past 2^53-1", sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) { c["pos"] = int64(MaxPosition) + 1 }))},
		{"pos the largest int64", sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) { c["pos"] = int64(math.MaxInt64) }))},
		{"pos zero", sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) { c["pos"] = 0 }))},
		{"pos negative", sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) { c["pos"] = -5 }))},
		{"pos a string", sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) { c["pos"] = "1" }))},
		{"pos fractional", sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) { c["pos"] = 1.5 }))},
		{"alg none", noneToken},
		{"alg none with a signature", noneWithSig},
		{"HS384", sign(jwt.SigningMethodHS384, secretA, kid, claims(nil))},
		{"HS512", sign(jwt.SigningMethodHS512, secretA, kid, claims(nil))},
		{"unknown kid", sign(jwt.SigningMethodHS256, secretA, map[string]any{"kid": "k9"}, claims(nil))},
		{"no kid", sign(jwt.SigningMethodHS256, secretA, nil, claims(nil))},
		{"wrong event", sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) { c["evt"] = 7 }))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ks.Verify(tt.raw, 42)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidToken)
		})
	}

	// The control: the untouched token verifies, and so do the largest
	// position and a tab in an id.
	_, err = ks.Verify(good.Raw, 42)
	require.NoError(t, err)
	for _, raw := range []string{
		sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) { c["pos"] = int64(MaxPosition) })),
		sign(jwt.SigningMethodHS256, secretA, kid, claims(func(c jwt.MapClaims) { c["sub"] = "user\t7" })),
	} {
		_, err = ks.Verify(raw, 42)
		require.NoError(t, err)
	}
	// Nor are such tokens ever signed.
	_, err = ks.Issue("u", 42, MaxPosition+1, time.Minute)
	assert.Error(t, err)
	_, err = ks.Issue("u\r\n", 42, 1, time.Minute)
	assert.Error(t, err)
}

func TestVerifyLeeway(t *testing.T) {
	clock := newClock()
	ks := mustKeySet(t, clock.Now, Key{ID: "k1", Secret: secretA})
	tok, err := ks.Issue("u", 1, 1, time.Minute)
	require.NoError(t, err)

	clock.Advance(time.Minute + DefaultLeeway - time.Second)
	_, err = ks.Verify(tok.Raw, 1)
	assert.NoError(t, err, "within the leeway")

	clock.Advance(2 * time.Second)
	_, err = ks.Verify(tok.Raw, 1)
	assert.ErrorIs(t, err, ErrInvalidToken, "past the leeway")
}

func TestVerifiedTokensAreRemembered(t *testing.T) {
	clock := newClock()
	issuer := mustKeySet(t, clock.Now, Key{ID: "k1", Secret: secretA})
	ks := mustKeySet(t, clock.Now, Key{ID: "k1", Secret: secretA})
	tok, err := issuer.Issue("u", 1, 3, time.Minute)
	require.NoError(t, err)

	first, err := ks.Verify(tok.Raw, 1)
	require.NoError(t, err)
	again, err := ks.Verify(tok.Raw, 1)
	require.NoError(t, err)
	assert.Equal(t, first, again)

	_, err = ks.Verify(tok.Raw, 2)
	assert.ErrorIs(t, err, ErrWrongEvent, "a remembered token is still bound to its event")

	clock.Advance(time.Minute + DefaultLeeway)
	_, err = ks.Verify(tok.Raw, 1)
	assert.ErrorIs(t, err, ErrInvalidToken, "a remembered token still expires")

	// One changed byte is another string: it goes through the parser.
	clock = newClock()
	ks = mustKeySet(t, clock.Now, Key{ID: "k1", Secret: secretA})
	_, err = ks.Verify(tok.Raw, 1)
	require.NoError(t, err)
	_, err = ks.Verify(tok.Raw[:len(tok.Raw)-2]+"AA", 1)
	assert.ErrorIs(t, err, ErrInvalidToken)
}

// TestIssuedTokensRememberedOnRequest: Issue remembers its token, while
// IssueHandedOut (the gateway's, for a place that may wait seconds before
// its first poll) leaves it to Remember.
func TestIssuedTokensRememberedOnRequest(t *testing.T) {
	ks := mustKeySet(t, newClock().Now, Key{ID: "k1", Secret: secretA})
	issued, err := ks.Issue("u", 1, 3, time.Minute)
	require.NoError(t, err)
	_, ok := ks.seen.get(issued.Raw)
	assert.True(t, ok, "Issue remembers")

	waiting, err := ks.IssueHandedOut("w", 1, 4, false, time.Time{}, time.Minute)
	require.NoError(t, err)
	_, ok = ks.seen.get(waiting.Raw)
	assert.False(t, ok, "IssueHandedOut does not")
	ks.Remember(waiting)
	got, ok := ks.seen.get(waiting.Raw)
	require.True(t, ok)
	assert.Equal(t, waiting, got)
	verified, err := ks.Verify(waiting.Raw, 1)
	require.NoError(t, err)
	assert.Equal(t, waiting, verified)
}

func TestVerifiedCacheIsBounded(t *testing.T) {
	c := newVerifiedCache(10)
	for i := range 100 {
		c.put(strings.Repeat("x", i+1), Ticket{Position: int64(i + 1)})
	}
	assert.LessOrEqual(t, len(c.cur)+len(c.prev), 10)
	got, ok := c.get(strings.Repeat("x", 100))
	assert.True(t, ok, "the newest entry is kept")
	assert.Equal(t, int64(100), got.Position)
	_, ok = c.get("x")
	assert.False(t, ok, "the oldest is gone")
	// A hit in the previous generation is carried forward.
	c = newVerifiedCache(4)
	c.put("a", Ticket{})
	c.put("b", Ticket{})
	c.put("c", Ticket{}) // a, b move to prev
	_, ok = c.get("a")
	require.True(t, ok)
	c.put("d", Ticket{}) // cur {c, a} full: a survives in prev
	_, ok = c.get("a")
	assert.True(t, ok)
}

func TestWrongEventIsDistinguishable(t *testing.T) {
	ks := mustKeySet(t, nil, Key{ID: "k1", Secret: secretA})
	tok, err := ks.Issue("u", 1, 1, time.Minute)
	require.NoError(t, err)
	_, err = ks.Verify(tok.Raw, 2)
	assert.ErrorIs(t, err, ErrWrongEvent)
	assert.ErrorIs(t, err, ErrInvalidToken)
}

func TestIssueRefusesBadClaims(t *testing.T) {
	ks := mustKeySet(t, nil, Key{ID: "k1", Secret: secretA})
	for _, c := range []struct {
		sub      string
		evt, pos int64
	}{{"", 1, 1}, {"u", 0, 1}, {"u", 1, 0}, {"u\x00", 1, 1}} {
		_, err := ks.Issue(c.sub, c.evt, c.pos, time.Minute)
		assert.Error(t, err, "%+v", c)
	}
}

func decodeSegment(t *testing.T, seg string, v any) {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(seg)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, v))
}

// FuzzVerify feeds arbitrary strings to the verifier: it must never panic and
// never accept anything it did not sign.
func FuzzVerify(f *testing.F) {
	clock := newClock()
	ks := mustKeySet(f, clock.Now, Key{ID: "k1", Secret: secretA})
	good, err := ks.Issue("user", 42, 9, time.Hour)
	require.NoError(f, err)
	parts := strings.Split(good.Raw, ".")
	f.Add(good.Raw)
	f.Add("")
	f.Add("a.b.c")
	f.Add(parts[0] + "." + parts[1] + ".")
	f.Add("eyJhbGciOiJub25lIn0." + parts[1] + ".")
	f.Add(strings.Repeat(".", 100))
	f.Fuzz(func(t *testing.T, raw string) {
		tok, err := ks.Verify(raw, 42)
		if err != nil {
			if tok != (Ticket{}) {
				t.Fatalf("a failed verification returned a ticket: %+v", tok)
			}
			return
		}
		// Only a token carrying our own signature over exactly these bytes
		// can pass.
		p := strings.Split(raw, ".")
		if len(p) != 3 {
			t.Fatalf("accepted a token with %d segments", len(p))
		}
		mac := hmac.New(sha256.New, secretA)
		mac.Write([]byte(p[0] + "." + p[1]))
		sig, err := base64.RawURLEncoding.DecodeString(p[2])
		if err != nil || !hmac.Equal(sig, mac.Sum(nil)) {
			t.Fatalf("accepted a token without our signature: %q", raw)
		}
		if tok.Event != 42 || tok.Position <= 0 || tok.Subject == "" {
			t.Fatalf("accepted bad claims: %+v", tok)
		}
	})
}

func BenchmarkIssue(b *testing.B) {
	ks := mustKeySet(b, nil, Key{ID: "k1", Secret: secretA})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ks.Issue("v_abcdefghijklmnopqrstuv", 42, 123456, 30*time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify is the common case: a token seen before (a visitor
// polling, an admitted buyer's next request).
func BenchmarkVerify(b *testing.B) {
	ks := mustKeySet(b, nil, Key{ID: "k1", Secret: secretA})
	tok, err := ks.Issue("v_abcdefghijklmnopqrstuv", 42, 123456, 30*time.Minute)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ks.Verify(tok.Raw, 42); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyFirstSight is a token this node has never seen: the HMAC
// and the claims decode.
func BenchmarkVerifyFirstSight(b *testing.B) {
	issuer := mustKeySet(b, nil, Key{ID: "k1", Secret: secretA})
	toks := make([]string, 4096)
	for i := range toks {
		tok, err := issuer.Issue("v_abcdefghijklmnopqrstuv", 42, int64(i+1), 30*time.Minute)
		require.NoError(b, err)
		toks[i] = tok.Raw
	}
	ks := mustKeySet(b, nil, Key{ID: "k1", Secret: secretA})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%len(toks) == 0 {
			ks.seen = newVerifiedCache(verifiedCacheSize)
		}
		if _, err := ks.Verify(toks[i%len(toks)], 42); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// Visitor ids are "v_" and 22 URL-safe characters (128 bits), each new.
func TestNewVisitorID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewVisitorID()
		require.Regexp(t, `^v_[A-Za-z0-9_-]{22}$`, id)
		assert.True(t, IsVisitorID(id))
		assert.False(t, seen[id], "id repeated")
		seen[id] = true
	}
}
