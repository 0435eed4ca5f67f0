// Package apitest checks HTTP traffic against an OpenAPI document: a
// RoundTripper that validates every request a test sends and every response
// it gets, and fails the test on any that the document does not describe.
// The origin's tests send all their traffic through it, so docs/openapi.yaml
// cannot drift from what the origin answers.
//
// A request the document refuses (a test probing bad input) is still sent;
// the document and the code agree only if the origin refuses it too, with a
// 4xx or a 503, so that is what such a request must get. A request no route
// of the document matches must be answered 404 or 405 with the error body.
// Bodies that are not JSON are checked by their content type only.
package apitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/waitroom/waitroom/waitroom"
)

// Validator holds one loaded document.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
	// unrouted are the error bodies of requests no route matches, by status.
	unrouted map[int]*openapi3.Schema
	count    atomic.Int64
}

var (
	originOnce sync.Once
	origin     *Validator
	originErr  error
)

// Origin is the validator of the origin's document, docs/openapi.yaml,
// loaded once per test binary.
func Origin() (*Validator, error) {
	originOnce.Do(func() {
		origin, originErr = Load(filepath.Join(repoRoot(), "docs", "openapi.yaml"))
	})
	return origin, originErr
}

// repoRoot is the module's root, found from this file's place in it.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Load reads and checks the document at path.
func Load(path string) (*Validator, error) {
	ctx := context.Background()
	doc, err := openapi3.NewLoader().LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("%s is not a valid OpenAPI document: %w", path, err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route %s: %w", path, err)
	}
	v := &Validator{doc: doc, router: router, unrouted: map[int]*openapi3.Schema{}}
	for status, name := range map[int]string{http.StatusNotFound: "ErrorNotFound", http.StatusMethodNotAllowed: "ErrorMethodNotAllowed"} {
		ref := doc.Components.Schemas[name]
		if ref == nil || ref.Value == nil {
			return nil, fmt.Errorf("%s: components.schemas.%s is missing", path, name)
		}
		v.unrouted[status] = ref.Value
	}
	return v, nil
}

// Count is how many responses the validator has checked.
func (v *Validator) Count() int64 { return v.count.Load() }

// Transport wraps base (http.DefaultTransport when nil) so that every
// exchange is validated; a mismatch fails t with the route and status. It
// reports to t only while t runs: a late exchange of a background sender
// (a webhook redelivery after the test) is written to stderr instead.
func (v *Validator) Transport(t testing.TB, base http.RoundTripper) *Transport {
	if base == nil {
		base = http.DefaultTransport
	}
	tr := &Transport{v: v, base: base, t: t}
	t.Cleanup(func() {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		tr.done = true
	})
	return tr
}

// Transport is a validating http.RoundTripper.
type Transport struct {
	v     *Validator
	base  http.RoundTripper
	t     testing.TB
	count atomic.Int64
	mu    sync.Mutex
	done  bool
}

// Count is how many responses this transport has checked.
func (tr *Transport) Count() int64 { return tr.count.Load() }

// Base is the wrapped transport.
func (tr *Transport) Base() http.RoundTripper { return tr.base }

// CloseIdleConnections passes on to the wrapped transport, so that
// http.Client.CloseIdleConnections keeps working.
func (tr *Transport) CloseIdleConnections() {
	if c, ok := tr.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (tr *Transport) fail(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.done {
		fmt.Fprintf(os.Stderr, "apitest (after the test ended): "+format+"\n", args...)
		return
	}
	tr.t.Errorf(format, args...)
}

// RoundTrip implements http.RoundTripper.
func (tr *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		body, err = io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("apitest: read the request body: %w", err)
		}
	}
	send := req.Clone(req.Context())
	if req.Body != nil {
		send.Body = io.NopCloser(bytes.NewReader(body))
		send.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}

	check := req.Clone(req.Context())
	check.Body = io.NopCloser(bytes.NewReader(body))
	if len(body) > 0 && check.Header.Get("Content-Type") == "" {
		// The origin reads every body as JSON, whatever it is labelled.
		check.Header.Set("Content-Type", "application/json")
	}
	what := req.Method + " " + req.URL.Path
	route, params, routeErr := tr.v.router.FindRoute(check)
	var reqInput *openapi3filter.RequestValidationInput
	var reqErr error
	if routeErr == nil {
		what = fmt.Sprintf("%s %s (%s)", req.Method, req.URL.Path, route.Path)
		reqInput = &openapi3filter.RequestValidationInput{
			Request: check, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: authenticate},
		}
		reqErr = openapi3filter.ValidateRequest(req.Context(), reqInput)
	}

	resp, err := tr.base.RoundTrip(send)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	if err != nil {
		// A cut connection is the test's business (fault injection), not
		// the document's: hand back what arrived.
		return resp, nil
	}
	tr.count.Add(1)
	tr.v.count.Add(1)

	if routeErr != nil {
		tr.checkUnrouted(what, routeErr, resp, raw)
		return resp, nil
	}
	if reqErr != nil && !refusal(resp.StatusCode) {
		tr.fail("openapi: %s: the document refuses this request (%v) but the origin answered %d: %s",
			what, short(reqErr), resp.StatusCode, raw)
	}
	respInput := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqInput,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	respInput.SetBodyBytes(raw)
	if err := openapi3filter.ValidateResponse(req.Context(), respInput); err != nil {
		tr.fail("openapi: %s answered %d, which docs/openapi.yaml does not describe: %v\nbody: %s",
			what, resp.StatusCode, short(err), raw)
	}
	return resp, nil
}

// refusal is an answer that turns a request down: a 4xx, or a 503 (a
// check that comes first, such as no payment provider, may answer it).
func refusal(status int) bool {
	return status >= 400 && status < 500 || status == http.StatusServiceUnavailable
}

func (tr *Transport) checkUnrouted(what string, routeErr error, resp *http.Response, raw []byte) {
	schema, ok := tr.v.unrouted[resp.StatusCode]
	if !ok || (resp.StatusCode == http.StatusMethodNotAllowed) != errors.Is(routeErr, routers.ErrMethodNotAllowed) {
		tr.fail("openapi: %s matches no route of docs/openapi.yaml (%v), yet the origin answered %d: %s",
			what, routeErr, resp.StatusCode, raw)
		return
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		tr.fail("openapi: %s answered %d with Content-Type %q, not JSON", what, resp.StatusCode, ct)
		return
	}
	var value any
	if err := jsonDecode(raw, &value); err != nil {
		tr.fail("openapi: %s answered %d with a body that is not JSON: %v: %s", what, resp.StatusCode, err, raw)
		return
	}
	if err := schema.VisitJSON(value, openapi3.EnableJSONSchema2020()); err != nil {
		tr.fail("openapi: %s answered %d with a body that is not the error body: %v", what, resp.StatusCode, short(err))
	}
}

// authenticate checks that a request carries the credential a security
// scheme names; whether it is valid is the origin's to say (a 401).
func authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	r := in.RequestValidationInput.Request
	switch in.SecuritySchemeName {
	case "adminBearer", "gateBearer":
		// HTTP's authentication scheme names are case-insensitive.
		if scheme, _, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
			return nil
		}
		return errors.New("no Authorization: Bearer header")
	case "queueToken":
		if strings.TrimSpace(r.Header.Get(in.SecurityScheme.Name)) != "" {
			return nil
		}
		return fmt.Errorf("no %s header", in.SecurityScheme.Name)
	case "queueCookie":
		for _, c := range r.Cookies() {
			if strings.HasPrefix(c.Name, waitroom.CookiePrefix) {
				return nil
			}
		}
		return errors.New("no waitroom_<event> cookie")
	}
	return fmt.Errorf("unknown security scheme %q", in.SecuritySchemeName)
}

// short keeps a validation error to its first lines: kin-openapi appends
// the whole schema and value.
func short(err error) string {
	s := err.Error()
	lines := strings.Split(s, "\n")
	if len(lines) > 6 {
		lines = append(lines[:6], "…")
	}
	return strings.Join(lines, "\n")
}
