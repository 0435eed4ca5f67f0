package caddymodule

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap/exp/zapslog"

	"github.com/waitroom/waitroom/edge/cloudflare"
	"github.com/waitroom/waitroom/waitroom"
)

// The event's state at Cloudflare's edge (docs/edge.md): the handler
// publishes it to Workers KV whenever its room sees it change, in the
// background, never on the request path.

// CloudflareKV is where the event's state is published for the Worker in
// edge/cloudflare/worker. Global placeholders ({env.CF_API_TOKEN}) are
// replaced in every field.
type CloudflareKV struct {
	// The Cloudflare account id. Required.
	AccountID string `json:"account_id,omitempty"`
	// The id of the KV namespace the Worker binds. Required.
	NamespaceID string `json:"namespace_id,omitempty"`
	// An API token allowed to edit Workers KV storage, usually
	// {env.CF_API_TOKEN}. Required.
	APIToken string `json:"api_token,omitempty"`
	// The API's base URL. Default: https://api.cloudflare.com/client/v4/.
	APIURL string `json:"api_url,omitempty"`
	// How long a change waits for the ones that follow it before the state
	// is written: the event's key is written at most once per debounce.
	// Default: 1s (Workers KV takes one write per second to a key).
	Debounce caddy.Duration `json:"debounce,omitempty"`
}

func (c *CloudflareKV) validate() error {
	switch {
	case c.AccountID == "":
		return fmt.Errorf("cloudflare_kv: account_id is required")
	case c.NamespaceID == "":
		return fmt.Errorf("cloudflare_kv: namespace_id is required")
	case c.APIToken == "":
		return fmt.Errorf("cloudflare_kv: api_token is required")
	case c.Debounce < 0:
		return fmt.Errorf("cloudflare_kv: debounce must not be negative (got %s)", time.Duration(c.Debounce))
	}
	return nil
}

// edgePublisher follows a room's state and publishes it.
type edgePublisher struct {
	pub    *cloudflare.Publisher
	page   cloudflare.Page
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// newEdgePublisher sets up the publisher of h's cloudflare_kv. It does no
// I/O and starts nothing.
func (h *Handler) newEdgePublisher() (*edgePublisher, error) {
	c := h.CloudflareKV
	repl := caddy.NewReplacer()
	cfg := cloudflare.Config{
		AccountID:   repl.ReplaceKnown(c.AccountID, ""),
		NamespaceID: repl.ReplaceKnown(c.NamespaceID, ""),
		APIToken:    repl.ReplaceKnown(c.APIToken, ""),
		APIURL:      repl.ReplaceKnown(c.APIURL, ""),
		Debounce:    time.Duration(c.Debounce),
	}
	logger := slog.New(zapslog.NewHandler(h.logger.Core()))
	pub, err := cloudflare.New(cfg, logger)
	if err != nil {
		// Usually an unset environment variable.
		return nil, fmt.Errorf("cloudflare_kv: %w once placeholders are replaced", err)
	}
	page, err := h.edgePage()
	if err != nil {
		return nil, err
	}
	return &edgePublisher{pub: pub, page: page}, nil
}

// edgePage is what the edge needs besides the state to answer as the
// handler does: the ids of its keys, its sold-out max-age, and its sold-out
// page in every language, rendered for the path "/" (the Worker puts the
// request's path into the links to the other languages).
func (h *Handler) edgePage() (cloudflare.Page, error) {
	ids := make([]string, len(h.Keys))
	for i, k := range h.Keys {
		ids[i] = k.ID
	}
	p := cloudflare.Page{
		KeyIDs:        ids,
		KeyChecks:     h.keyChecks,
		SoldOutMaxAge: int64(math.Ceil(time.Duration(h.SoldOutMaxAge).Seconds())),
		SoldOutPages:  map[string]string{},
	}
	for _, text := range h.catalog.Languages() {
		page, err := h.catalogPage(text, &url.URL{Path: "/"})
		if err != nil {
			return cloudflare.Page{}, fmt.Errorf("cloudflare_kv: the sold-out page in %s: %w", text.Lang(), err)
		}
		var b strings.Builder
		if err := h.soldOutPage.Execute(&b, SoldOutPage{Page: page, Event: h.Event}); err != nil {
			return cloudflare.Page{}, fmt.Errorf("cloudflare_kv: rendering the sold-out page in %s: %w", text.Lang(), err)
		}
		p.Languages = append(p.Languages, text.Lang())
		p.SoldOutPages[text.Lang()] = b.String()
	}
	return p, nil
}

// edgeRecheck is how often the publisher looks again at what the state
// gives positions not yet admitted: the origin's figures (all held or sold
// out) change without a change of the state.
const edgeRecheck = time.Second

// start publishes room's state, with what judge says positions not yet
// admitted get at that state, once the room has read it from the store,
// and again at every change, until stop or the end of parent (the
// config's context).
func (e *edgePublisher) start(parent context.Context, room *waitroom.Room, judge func(waitroom.State) waitroom.Availability) {
	ctx, cancel := context.WithCancel(parent)
	e.cancel = cancel
	e.done.Add(2)
	go func() {
		defer e.done.Done()
		e.pub.Run(ctx)
	}()
	go func() {
		defer e.done.Done()
		select {
		case <-ctx.Done():
			return
		case <-room.Ready():
		}
		recheck := time.NewTicker(edgeRecheck)
		defer recheck.Stop()
		for {
			changed := room.Changed()
			s := room.State()
			// An unchanged value is not written again (Publisher.Publish).
			e.pub.Publish(cloudflare.StateOf(s, judge(s), e.page))
			select {
			case <-ctx.Done():
				return
			case <-changed:
			case <-recheck.C:
			}
		}
	}()
}

// stop ends the publishing; a write in flight is abandoned, and the
// config that replaces this one publishes the state again.
func (e *edgePublisher) stop() {
	if e == nil || e.cancel == nil {
		return
	}
	e.cancel()
	e.done.Wait()
}
