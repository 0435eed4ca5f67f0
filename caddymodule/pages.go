package caddymodule

import (
	"embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"
)

// The default pages. They inline their styles and script: every other asset
// of the site sits behind the waiting room itself.
//
//go:embed templates/*.html
var templateFiles embed.FS

var (
	defaultWaitingPage     = template.Must(template.ParseFS(templateFiles, "templates/waiting.html"))
	defaultSoldOutPage     = template.Must(template.ParseFS(templateFiles, "templates/sold_out.html"))
	defaultUnavailablePage = template.Must(template.ParseFS(templateFiles, "templates/unavailable.html"))
	defaultPreQueuePage    = template.Must(template.ParseFS(templateFiles, "templates/pre_queue.html"))
	defaultChallengePage   = template.Must(template.ParseFS(templateFiles, "templates/challenge.html"))
	defaultRateLimitedPage = template.Must(template.ParseFS(templateFiles, "templates/rate_limited.html"))
)

// PreQueuePage is what the pre-queue page is executed with: before a
// scheduled opening, it counts down from OpensInSeconds (the server's
// clock, not the visitor's) and reloads at the opening, when the visitor
// gets the position the draw gave it.
type PreQueuePage struct {
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
// "sold_out" (status 410) means it never will be. A <noscript> meta refresh
// of RetryAfterSeconds covers browsers without JavaScript.
type WaitingPage struct {
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
	// EstimatedWait is the estimate in words ("about 4 minutes", "less than
	// a minute"); empty when there is nothing to estimate from yet.
	EstimatedWait string
	// Paused is true while the event's entry is paused.
	Paused bool
	// RetryAfterSeconds is how long to wait before polling again.
	RetryAfterSeconds int
}

// SoldOutPage is what the sold-out page template (sold_out_template) is
// executed with.
type SoldOutPage struct {
	// Event is the event id.
	Event int64
}

// UnavailablePage is what the page shown to a new arrival while the queue's
// store is unreachable is executed with.
type UnavailablePage struct {
	Event             int64
	RetryAfterSeconds int
}

// sampleWaitingPage exercises every field when a configured template is
// checked at load time.
var sampleWaitingPage = WaitingPage{
	Event: 1, Position: 12400, AdmittedThrough: 5000, Ahead: 7399,
	EstimatedWaitSeconds: 240, EstimatedWait: "about 4 minutes", RetryAfterSeconds: 10,
}

// loadTemplate parses the configured template file of the named setting, or
// returns the default. A configured template is executed once with sample
// data, so a reference to a field that does not exist fails the config load
// rather than a visitor's request.
func loadTemplate(setting, file string, def *template.Template, sample any) (*template.Template, error) {
	if file == "" {
		return def, nil
	}
	text, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", setting, err)
	}
	t, err := template.New(filepath.Base(file)).Parse(string(text))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", setting, err)
	}
	if err := t.Execute(io.Discard, sample); err != nil {
		return nil, fmt.Errorf("%s: %w", setting, err)
	}
	return t, nil
}

// DescribeWait puts an estimated wait in words for the waiting page:
// "less than a minute", "about 1 minute", "about 25 minutes", "about 2
// hours"; empty when the wait is unknown.
func DescribeWait(d time.Duration, known bool) string {
	switch {
	case !known:
		return ""
	case d < time.Minute:
		return "less than a minute"
	case d < 90*time.Minute:
		m := int(math.Round(d.Minutes()))
		if m <= 1 {
			return "about 1 minute"
		}
		return fmt.Sprintf("about %d minutes", m)
	default:
		return fmt.Sprintf("about %d hours", int(math.Round(d.Hours())))
	}
}
