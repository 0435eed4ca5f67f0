package cloudflare

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/waitroom"
)

const (
	testAccount   = "023e105f4ecef8ad9ca31a8372d0c353"
	testNamespace = "0f2ac74b498b48028cb68387c421e279"
	testToken     = "Sn3lZJTBX6kkg7OdcBUAxOO963GEIyGQqnFTOFYY"
)

// write is one value write the stand-in accepted.
type write struct {
	key   string
	state State
}

// standIn is the part of the Cloudflare API the publisher uses: it checks
// every request as the API would and answers with the status fail gives
// (200 when it says 0).
type standIn struct {
	t    *testing.T
	srv  *httptest.Server
	mu   sync.Mutex
	fail []int
	seen int
	got  []write
	// writes receives every accepted write.
	writes chan write
}

func newStandIn(t *testing.T, fail ...int) *standIn {
	s := &standIn{t: t, fail: fail, writes: make(chan write, 100)}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /client/v4/accounts/{account}/storage/kv/namespaces/{ns}/values/{key}", s.put)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("unexpected request %s %s", r.Method, r.URL)
		http.NotFound(w, r)
	})
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

func (s *standIn) url() string { return s.srv.URL + "/client/v4/" }

func (s *standIn) put(w http.ResponseWriter, r *http.Request) {
	t := s.t
	assert.Equal(t, testAccount, r.PathValue("account"))
	assert.Equal(t, testNamespace, r.PathValue("ns"))
	assert.Equal(t, "Bearer "+testToken, r.Header.Get("Authorization"))
	assert.Empty(t, r.URL.RawQuery, "no expiration: the state stays until replaced")
	// The API stores the "value" field of a multipart form as it is.
	assert.True(t, strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data; boundary="), r.Header.Get("Content-Type"))
	require.NoError(t, r.ParseMultipartForm(1<<20))
	assert.Empty(t, r.MultipartForm.File, "the value is a plain field, not a file")
	assert.Len(t, r.MultipartForm.Value, 1, "no metadata")
	require.Len(t, r.MultipartForm.Value["value"], 1)
	value := r.MultipartForm.Value["value"][0]
	var st State
	assert.NoError(t, json.Unmarshal([]byte(value), &st), value)

	s.mu.Lock()
	status := 0
	if s.seen < len(s.fail) {
		status = s.fail[s.seen]
	}
	s.seen++
	if status == 0 {
		s.got = append(s.got, write{r.PathValue("key"), st})
	}
	s.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	if status != 0 {
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"success":false,"errors":[{"code":10001,"message":"service unavailable"}],"messages":[],"result":null}`))
		return
	}
	_, _ = w.Write([]byte(`{"success":true,"errors":[],"messages":[],"result":{}}`))
	s.writes <- write{r.PathValue("key"), st}
}

func (s *standIn) requests() (tried int, written []write) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen, append([]write(nil), s.got...)
}

// fakeClock is a settable clock.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

func newTestPublisher(t *testing.T, api *standIn, debounce time.Duration) (*Publisher, *fakeClock) {
	t.Helper()
	p, err := New(Config{AccountID: testAccount, NamespaceID: testNamespace, APIToken: testToken,
		APIURL: api.url(), Debounce: debounce}, nil)
	require.NoError(t, err)
	clk := &fakeClock{now: time.Date(2030, 1, 31, 10, 0, 0, 0, time.UTC)}
	p.now = clk.Now
	// 1s, 2s, 4s, … without jitter, so the test knows when a retry is due.
	p.backoff = func(n int) time.Duration { return time.Second << (n - 1) }
	return p, clk
}

func stateAt(event, watermark int64, soldOut bool) State {
	return StateOf(waitroom.State{Event: event, Watermark: watermark, SoldOut: soldOut, HardCap: 900}, waitroom.Availability{SoldOut: soldOut},
		Page{KeyIDs: []string{"k2", "k1"}, SoldOutMaxAge: 10,
			Languages: []string{"en", "de"}, SoldOutPages: map[string]string{"en": "<p>Sold out</p>", "de": "<p>Ausverkauft</p>"}})
}

func TestPublishWritesTheStateAfterTheDebounce(t *testing.T) {
	api := newStandIn(t)
	p, clk := newTestPublisher(t, api, time.Second)
	ctx := context.Background()

	p.Publish(stateAt(42, 100, false))
	next, err := p.RunOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, clk.now.Add(time.Second), next, "due a debounce after the change")
	tried, _ := api.requests()
	assert.Zero(t, tried, "nothing written before the debounce")

	clk.Advance(time.Second)
	next, err = p.RunOnce(ctx)
	require.NoError(t, err)
	assert.True(t, next.IsZero(), "nothing left to write")
	_, written := api.requests()
	require.Len(t, written, 1)
	assert.Equal(t, write{"event-42", stateAt(42, 100, false)}, written[0])

	// The same state again is not written again.
	p.Publish(stateAt(42, 100, false))
	clk.Advance(time.Hour)
	_, err = p.RunOnce(ctx)
	require.NoError(t, err)
	tried, _ = api.requests()
	assert.Equal(t, 1, tried)
}

func TestManyChangesMakeFewWrites(t *testing.T) {
	api := newStandIn(t)
	p, clk := newTestPublisher(t, api, time.Second)
	ctx := context.Background()

	// Ten seconds of an autopilot raising two events' watermarks ten times
	// a second, then one of them sells out.
	for tick := 1; tick <= 100; tick++ {
		p.Publish(stateAt(1, int64(tick), false))
		p.Publish(stateAt(2, int64(10*tick), false))
		clk.Advance(100 * time.Millisecond)
		_, err := p.RunOnce(ctx)
		require.NoError(t, err)
	}
	p.Publish(stateAt(1, 100, true))
	clk.Advance(time.Second)
	_, err := p.RunOnce(ctx)
	require.NoError(t, err)

	_, written := api.requests()
	perKey := map[string]int{}
	last := map[string]State{}
	for _, w := range written {
		perKey[w.key]++
		last[w.key] = w.state
	}
	// One write per second per key at most (KV's own limit), and the
	// last write is the latest state.
	assert.LessOrEqual(t, perKey["event-1"], 11)
	assert.LessOrEqual(t, perKey["event-2"], 10)
	assert.GreaterOrEqual(t, perKey["event-2"], 9, "a steady stream of changes is still written every debounce")
	assert.Equal(t, stateAt(1, 100, true), last["event-1"])
	assert.Equal(t, stateAt(2, 1000, false), last["event-2"])
}

func TestFailedWritesAreRetriedWithBackoff(t *testing.T) {
	api := newStandIn(t, http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusTooManyRequests)
	p, clk := newTestPublisher(t, api, time.Second)
	ctx := context.Background()

	p.Publish(stateAt(42, 5, false))
	clk.Advance(time.Second)
	next, err := p.RunOnce(ctx)
	require.Error(t, err, "the API answered 500")
	assert.Equal(t, clk.now.Add(time.Second), next, "first retry after 1s")

	// A newer state replaces the one being retried.
	p.Publish(stateAt(42, 6, true))
	clk.Advance(999 * time.Millisecond)
	_, err = p.RunOnce(ctx)
	require.NoError(t, err)
	tried, _ := api.requests()
	assert.Equal(t, 1, tried, "no retry before the backoff")

	clk.Advance(time.Millisecond)
	next, err = p.RunOnce(ctx)
	require.Error(t, err, "503")
	assert.Equal(t, clk.now.Add(2*time.Second), next, "the backoff doubles")

	clk.Advance(2 * time.Second)
	next, err = p.RunOnce(ctx)
	require.Error(t, err, "429")
	assert.Equal(t, clk.now.Add(4*time.Second), next)

	clk.Advance(4 * time.Second)
	next, err = p.RunOnce(ctx)
	require.NoError(t, err)
	assert.True(t, next.IsZero())
	tried, written := api.requests()
	assert.Equal(t, 4, tried, "one request per try: the client does not retry on its own")
	require.Len(t, written, 1)
	assert.Equal(t, stateAt(42, 6, true), written[0].state, "the newest state is the one written")

	// After a success the backoff starts over.
	p.Publish(stateAt(42, 7, true))
	clk.Advance(time.Second)
	_, err = p.RunOnce(ctx)
	require.NoError(t, err)
	_, written = api.requests()
	assert.Len(t, written, 2)
}

func TestRunWritesInTheBackground(t *testing.T) {
	api := newStandIn(t)
	p, err := New(Config{AccountID: testAccount, NamespaceID: testNamespace, APIToken: testToken,
		APIURL: api.url(), Debounce: time.Millisecond}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx)
	}()
	p.Publish(stateAt(7, 3, true))
	select {
	case w := <-api.writes:
		assert.Equal(t, write{"event-7", stateAt(7, 3, true)}, w)
	case <-time.After(10 * time.Second):
		t.Fatal("the state was never written")
	}
	cancel()
	<-done
}

func TestConfigValidate(t *testing.T) {
	ok := Config{AccountID: "a", NamespaceID: "n", APIToken: "t"}
	for name, tc := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"complete":     {func(*Config) {}, ""},
		"no account":   {func(c *Config) { c.AccountID = "" }, "account_id is required"},
		"no namespace": {func(c *Config) { c.NamespaceID = "" }, "namespace_id is required"},
		"no token":     {func(c *Config) { c.APIToken = "" }, "api_token is required"},
		"bad debounce": {func(c *Config) { c.Debounce = -time.Second }, "debounce must not be negative"},
		"a proxy":      {func(c *Config) { c.APIURL = "http://127.0.0.1:8080/client/v4" }, ""},
		// Each loaded, then failed every write for good, retried forever.
		"api_url without a scheme": {func(c *Config) { c.APIURL = "api.cloudflare.com/client/v4/" }, `api_url: want an http or https URL, got "api.cloudflare.com/client/v4/"`},
		"api_url host and port":    {func(c *Config) { c.APIURL = "kv-proxy.internal:8080" }, `api_url: want an http or https URL, got "kv-proxy.internal:8080"`},
		"api_url another scheme":   {func(c *Config) { c.APIURL = "ftp://kv-proxy.internal/" }, "api_url: want an http or https URL"},
	} {
		t.Run(name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestJitteredBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 7: time.Minute, 40: time.Minute} {
		for range 20 {
			d := jitteredBackoff(n)
			assert.GreaterOrEqual(t, d, want/2, n)
			assert.LessOrEqual(t, d, want, n)
		}
	}
}
