// Package cloudflare publishes each event's admission state to a Workers KV
// namespace, where the Worker in worker/ reads it to answer sold-out traffic
// at Cloudflare's edge, so that traffic never reaches a gateway
// (docs/edge.md).
//
// The gateway owns the state (watermark, sold out, paused, hard cap) and
// publishes it: each gateway node configured with cloudflare_kv writes the
// whole state of its event under one key whenever its view of it changes.
// A value is a pure function of the state, so writes from several nodes are
// idempotent: whichever lands last, every node's last write is its latest
// view, and the views converge on the store's.
package cloudflare

import (
	"strconv"

	"github.com/waitroom/waitroom/waitroom"
)

// Version is the layout of State; the Worker refuses values of another
// layout and passes their traffic on. 2 added AllHeld: a Worker of
// layout 1 would answer 410 where the gateway keeps visitors waiting.
const Version = 2

// State is the KV value of one event: what the Worker needs to judge a
// request as the gateway would. It never carries a signing secret: the
// Worker has those as a secret binding, and KeyIDs only says which of them
// the gateway still accepts.
type State struct {
	Version int   `json:"v"`
	Event   int64 `json:"event"`
	SoldOut bool  `json:"sold_out"`
	// AllHeld is set while the gateway keeps visitors waiting despite
	// SoldOut: no seat is left, but MayReturn seats in live holds may
	// come back (docs/api.md §3). The Worker answers 410 only for a
	// SoldOut state without it, which nothing brings back.
	AllHeld   bool  `json:"all_held"`
	MayReturn int64 `json:"may_return"`
	Paused    bool  `json:"paused"`
	Watermark int64 `json:"watermark"`
	// HardCap is the last position admitted for now; 0 means none. It can
	// be raised live, or follow the remaining seats, so the Worker never
	// answers 410 by it.
	HardCap int64 `json:"hard_cap"`
	// KeyIDs are the kids of the gateway's key set, signing key first.
	KeyIDs []string `json:"key_ids"`
	// KeyChecks is waitroom.KeyCheck of each kid's secret: a Worker whose secret
	// of a kid gives another check has a wrong one, and leaves that kid's
	// tokens to the gateway rather than judge them forged.
	KeyChecks map[string]string `json:"key_checks,omitempty"`
	// SoldOutMaxAge is the max-age, in seconds, of the sold-out answer's
	// Cache-Control.
	SoldOutMaxAge int64 `json:"sold_out_max_age"`
	// Languages are the tags of the gateway's page languages, its default
	// first.
	Languages []string `json:"languages"`
	// SoldOutPages is the gateway's sold-out page in each language,
	// rendered for a request without a query: its links to the other
	// languages are "?lang=<tag>", which keep any path.
	SoldOutPages map[string]string `json:"sold_out_pages"`
}

// Page is what a gateway adds to an event's state for the edge: its keys'
// ids and the sold-out answer it gives.
type Page struct {
	KeyIDs        []string
	KeyChecks     map[string]string
	SoldOutMaxAge int64
	Languages     []string
	SoldOutPages  map[string]string
}

// StateOf is the KV value of s, with what the gateway answers positions
// not yet admitted by (a: sold out, or all held) and its page settings.
func StateOf(s waitroom.State, a waitroom.Availability, p Page) State {
	held := a.AllHeld && !a.SoldOut
	var mayReturn int64
	if held {
		mayReturn = a.MayReturn
	}
	return State{
		Version:       Version,
		Event:         s.Event,
		SoldOut:       s.SoldOut,
		AllHeld:       held,
		MayReturn:     mayReturn,
		Paused:        s.Paused,
		Watermark:     s.Watermark,
		HardCap:       s.HardCap,
		KeyIDs:        p.KeyIDs,
		KeyChecks:     p.KeyChecks,
		SoldOutMaxAge: p.SoldOutMaxAge,
		Languages:     p.Languages,
		SoldOutPages:  p.SoldOutPages,
	}
}

// Key is the KV key of event's state.
func Key(event int64) string { return "event-" + strconv.FormatInt(event, 10) }
