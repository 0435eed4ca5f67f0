package caddymodule

import "github.com/waitroom/waitroom/locale"

// What the pages are executed with (waiting_template and sold_out_template
// are executed with WaitingPage and SoldOutPage), and the JSON forms of the
// answers (docs/api.md §3, docs/opening.md).

// Page is what every page is executed with, embedded in its own data: the
// visitor's language ({{.Lang}}, {{.T "message_id"}}, {{.Number n}}) and
// links to the page in the others.
type Page struct {
	locale.Text
	Languages []LanguageLink
}

// LanguageLink is this page in one of the catalog's languages.
type LanguageLink struct {
	// Lang is the language's tag; Name its name in itself.
	Lang, Name string
	// Href is this page's URL with ?lang= set.
	Href string
	// Current is the language the page is in.
	Current bool
}

// PreQueuePage is what the pre-queue page is executed with: before a
// scheduled opening, it counts down from OpensInSeconds (the server's
// clock, not the visitor's) and reloads at the opening, when the visitor
// gets the position the draw gave it.
type PreQueuePage struct {
	Page
	Event int64
	// OpensAt is the opening, RFC 3339 in UTC.
	OpensAt string
	// OpensInSeconds is how long until then, by the gateway's clock.
	OpensInSeconds int64
	// LotteryCommitment is the hex SHA-256 of the draw's seed.
	LotteryCommitment string
}

// ChallengePage is what the challenge page is executed with: it finds a
// solution in a Web Worker and sends the request again with it.
type ChallengePage struct {
	Page
	Event      int64
	Challenge  string
	Difficulty int
}

// WaitingPage is what the waiting page template (waiting_template) is
// executed with.
//
// A replacement page should poll the JSON form, as the default one does:
// fetch the page's own URL with the header "Accept: application/json" and
// credentials "same-origin" every Retry-After seconds; X-Waitroom-Status
// "admitted" on the answer means it is the visitor's turn (reload the page),
// "sold_out" (status 410) means it never will be (reload the page: it is
// the sold-out page then). A <noscript> meta refresh of RetryAfterSeconds
// covers browsers without JavaScript. The embedded Page gives the visitor's
// language.
type WaitingPage struct {
	Page
	// Event is the event id.
	Event int64
	// Position is the visitor's place in the queue (1-based).
	Position int64
	// AdmittedThrough is the watermark: every position up to it is admitted.
	AdmittedThrough int64
	// Ahead is how many positions are still to be admitted before this one.
	Ahead int64
	// EstimatedWaitSeconds is the estimated wait; 0 when unknown.
	EstimatedWaitSeconds int64
	// EstimatedWait is the estimate in words, in the page's language ("about
	// 4 minutes", "less than a minute"); empty when there is nothing to
	// estimate from yet.
	EstimatedWait string
	// Paused is true while the event's entry is paused.
	Paused bool
	// AllHeld is true while no seat is left but MayReturn seats are in
	// live holds, which may come back within MayReturnWithinSeconds if
	// their buyers do not pay (docs/api.md §3); AllHeldWords says so in
	// the page's language. Zero values otherwise.
	AllHeld                bool
	MayReturn              int64
	MayReturnWithinSeconds int64
	AllHeldWords           string
	// RetryAfterSeconds is how long to wait before polling again.
	RetryAfterSeconds int
}

// SoldOutPage is what the sold-out page template (sold_out_template) is
// executed with.
type SoldOutPage struct {
	Page
	// Event is the event id.
	Event int64
}

// UnavailablePage is what the page shown to a new arrival while the queue's
// store is unreachable is executed with.
type UnavailablePage struct {
	Page
	Event             int64
	RetryAfterSeconds int
}

// sampleWaitingPage exercises every field when a configured template is
// checked at load time.
var sampleWaitingPage = WaitingPage{
	Event: 1, Position: 12400, AdmittedThrough: 5000, Ahead: 7399,
	EstimatedWaitSeconds: 240, EstimatedWait: "about 4 minutes", RetryAfterSeconds: 10,
	AllHeld: true, MayReturn: 12, MayReturnWithinSeconds: 600,
	AllHeldWords: "Every ticket is in someone’s basket right now. About 12 of them may come back in the next 10 minutes, if their buyers don’t pay. You keep your place.",
}

// waitingBody is the JSON form of the waiting answer.
type waitingBody struct {
	Status          string `json:"status"`
	Event           int64  `json:"event"`
	Position        int64  `json:"position"`
	AdmittedThrough int64  `json:"admitted_through"`
	Ahead           int64  `json:"ahead"`
	// EstimatedWaitSeconds is null while no admission rate is known.
	EstimatedWaitSeconds *int64 `json:"estimated_wait_seconds"`
	Token                string `json:"token"`
	Paused               bool   `json:"paused"`
	// AllHeld: no seat is left to hold, but MayReturn seats are in live
	// holds that end, paid for or back on sale, within
	// MayReturnWithinSeconds (docs/api.md §3).
	AllHeld                bool  `json:"all_held"`
	MayReturn              int64 `json:"may_return,omitempty"`
	MayReturnWithinSeconds int64 `json:"may_return_within_seconds,omitempty"`
}

// preQueueBody is the JSON form of the pre-queue answer.
type preQueueBody struct {
	Status            string `json:"status"`
	Event             int64  `json:"event"`
	OpensAt           string `json:"opens_at"`
	LotteryCommitment string `json:"lottery_commitment"`
	OpensInSeconds    int64  `json:"opens_in_seconds"`
	Token             string `json:"token"`
}

// challengeBody is the JSON form of the challenge answer.
type challengeBody struct {
	Status     string `json:"status"`
	Event      int64  `json:"event"`
	Challenge  string `json:"challenge"`
	Difficulty int    `json:"difficulty"`
	ExpiresAt  string `json:"expires_at"`
}
