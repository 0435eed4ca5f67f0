// Package api is the load generator's client of the gateway, the origin and
// their admin APIs, written against the contract (API.md) rather than the
// servers' code.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/waitroom/waitroom/waitroom"
)

// Header names of the contract.
const (
	HeaderToken          = waitroom.TokenHeader
	HeaderStatus         = "X-Waitroom-Status"
	HeaderIdempotencyKey = "Idempotency-Key"
)

// X-Waitroom-Status values.
const (
	StatusWaiting  = "waiting"
	StatusAdmitted = "admitted"
	StatusSoldOut  = "sold_out"
)

// NewHTTPClient returns a client for many concurrent virtual users sharing
// at most conns connections per host (0: no limit), each request bounded by
// timeout. It keeps no cookies: tokens travel in X-Waitroom-Token.
func NewHTTPClient(conns int, timeout time.Duration) *http.Client {
	idle := conns
	if idle == 0 {
		idle = 1024
	}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxConnsPerHost:     conns,
			MaxIdleConns:        idle * 4,
			MaxIdleConnsPerHost: idle,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
	}
}

// Client talks to one base URL.
type Client struct {
	HTTP *http.Client
	Base string
}

// Request is one call.
type Request struct {
	Method string
	Path   string
	// Token is sent as X-Waitroom-Token; Bearer as Authorization.
	Token, Bearer  string
	IdempotencyKey string
	// Body is marshalled to JSON unless Raw is set.
	Body   any
	Raw    []byte
	Header http.Header
}

// Response is an answer read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Waitroom is the X-Waitroom-Status header ("" when the gateway set none).
func (r Response) Waitroom() string { return r.Header.Get(HeaderStatus) }

// RetryAfter is the Retry-After header in seconds, or def without one.
func (r Response) RetryAfter(def time.Duration) time.Duration {
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	return def
}

// Decode reads the body as JSON into v.
func (r Response) Decode(v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("decode %d answer %.200q: %w", r.Status, r.Body, err)
	}
	return nil
}

// Error is the contract's error body.
type Error struct {
	Code    string `json:"error"`
	Message string `json:"message"`
}

// ErrorCode is the error code of an error answer ("" when there is none).
func (r Response) ErrorCode() string {
	var e Error
	_ = json.Unmarshal(r.Body, &e)
	return e.Code
}

// Unexpected describes an answer the caller has no case for.
func (r Response) Unexpected(what string) error {
	return fmt.Errorf("%s: unexpected %d %.300s", what, r.Status, bytes.TrimSpace(r.Body))
}

// Do sends req and reads the answer.
func (c *Client) Do(ctx context.Context, req Request) (Response, error) {
	var body io.Reader
	switch {
	case req.Raw != nil:
		body = bytes.NewReader(req.Raw)
	case req.Body != nil:
		b, err := json.Marshal(req.Body)
		if err != nil {
			return Response{}, fmt.Errorf("encode %s %s: %w", req.Method, req.Path, err)
		}
		body = bytes.NewReader(b)
	}
	hr, err := http.NewRequestWithContext(ctx, req.Method, c.Base+req.Path, body)
	if err != nil {
		return Response{}, err
	}
	for k, vs := range req.Header {
		hr.Header[k] = vs
	}
	hr.Header.Set("Accept", "application/json")
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if req.Token != "" {
		hr.Header.Set(HeaderToken, req.Token)
	}
	if req.Bearer != "" {
		hr.Header.Set("Authorization", "Bearer "+req.Bearer)
	}
	if req.IdempotencyKey != "" {
		hr.Header.Set(HeaderIdempotencyKey, req.IdempotencyKey)
	}
	resp, err := c.HTTP.Do(hr)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, fmt.Errorf("read %s %s: %w", req.Method, req.Path, err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}
