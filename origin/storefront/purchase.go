package storefront

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/waitroom/waitroom/locale"
	"github.com/waitroom/waitroom/origin/booking"
	"github.com/waitroom/waitroom/origin/idem"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/origin/seats"
)

// detached is the request's context, not ended by the buyer hanging up:
// what a request began is finished.
func detached(r *http.Request) context.Context { return context.WithoutCancel(r.Context()) }

// holdScope is the idempotency record of a hold form: the pages' own kind,
// so a page's key never answers an API request.
func holdScope(event int64, user, key string) idem.Scope {
	return idem.Scope{Kind: "storefront-holds", Event: event, User: user, Key: key}
}

func holdDigest(req seats.PlaceRequest, best bool) string {
	return idem.RequestDigest("storefront\x00" + strconv.FormatBool(best) + "\x00" + req.Section + "\x00" +
		strconv.FormatInt(req.Quantity, 10) + "\x00" + strings.Join(req.Seats, ","))
}

// A hold: its seats, its amount, its countdown, its release, its payment.

type holdPage struct {
	Hold      ledger.Hold
	Event     ledger.Event
	Status    string
	Seats     []string
	Key       string
	Cards     []card
	Card      string
	Payable   bool
	ExpiresIn int64
	// Booking is the hold's live booking ("" for none): paid for
	// (Booked, the hold confirmed) or its payment under way (Paying).
	Booking string
	Booked  bool
	Paying  bool
	// Declined is the booking whose payment the pay form was just told
	// failed, while a provider may still report it succeeded ("" when
	// none); the page's script looks at it every RecheckEvery seconds for
	// Recheck more.
	Declined     string
	Recheck      int64
	RecheckEvery int
}

// card is a payment method the pay form offers.
type card struct{ Token, Label string }

// cardsOf are the payment methods of the provider: its test cards. fakepay
// takes Stripe's test payment methods, and so does Stripe in test mode.
func cardsOf(provider string) []card {
	stripeCards := []card{
		{payment.MethodVisa, "shop_card_visa"},
		{"pm_card_mastercard", "shop_card_mastercard"},
		{payment.MethodDeclined, "shop_card_declined"},
		{"pm_card_chargeDeclinedInsufficientFunds", "shop_card_insufficient"},
	}
	switch provider {
	case payment.NameFakepay:
		// Its own card for a payment declined and then, a few seconds
		// later, accepted: what a buyer meets with an asynchronous
		// authentication, which Stripe's test cards cannot show here.
		return append(stripeCards, card{payment.MethodFailThenSucceed, "shop_card_fail_then_succeed"})
	case payment.NameStripe:
		return stripeCards
	}
	return nil
}

// ownHold is the path's hold if it is the buyer's; else a page saying there
// is none (someone else's hold is no one's to this buyer).
func (s *Store) ownHold(w http.ResponseWriter, r *http.Request) (ledger.Hold, *seats.Event, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, http.StatusNotFound, "shop_err_not_found")
		return ledger.Hold{}, nil, false
	}
	h, err := s.cfg.Ledger.Hold(r.Context(), id.String())
	if err != nil {
		s.lookupFailed(w, r, err)
		return ledger.Hold{}, nil, false
	}
	if !s.buyerOf(w, r, h.EventID).owns(h.UserID) {
		s.fail(w, r, http.StatusNotFound, "shop_err_not_found")
		return ledger.Hold{}, nil, false
	}
	ev, err := s.cfg.Seats.Registry().Event(r.Context(), h.EventID)
	if err != nil {
		s.lookupFailed(w, r, err)
		return ledger.Hold{}, nil, false
	}
	return h, ev, true
}

func (s *Store) lookupFailed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, ledger.ErrNotFound) {
		s.fail(w, r, http.StatusNotFound, "shop_err_not_found")
		return
	}
	s.fail(w, r, http.StatusServiceUnavailable, "shop_err_unavailable")
}

func (s *Store) handleHoldPage(w http.ResponseWriter, r *http.Request) {
	h, ev, ok := s.ownHold(w, r)
	if !ok {
		return
	}
	v := view{}
	if r.URL.Query().Has(alreadyHeld) {
		// The buyer asked for seats while holding these (one hold per
		// buyer): say so, rather than show other seats than those chosen.
		switch h.StatusAt(s.now()) {
		case ledger.StatusPending:
			v.Text = s.text(w, r)
			v.Notice = msg(v.Text, "shop_already_held")
		case ledger.StatusConfirmed:
			v.Text = s.text(w, r)
			v.Notice = msg(v.Text, "shop_already_booked")
		}
	}
	var declined *ledger.Booking
	if h.StatusAt(s.now()) == ledger.StatusPending && s.cfg.Bookings != nil {
		// A payment declined a moment ago may still go through: the page
		// shown again (a reload, Back, a link) watches it as the pay form's
		// answer did, so that a second card is not sent unawares.
		if b, err := s.cfg.Ledger.Bookings().LastFailedOfHold(r.Context(), h.UserID, h.ID); err == nil && s.now().Sub(b.UpdatedAt) < failedWatch {
			declined = &b
		}
	}
	s.renderHold(w, r, http.StatusOK, h, ev, v, "", declined)
}

// alreadyHeld is the query a hold form's answer adds to the page of the
// hold the buyer had already.
const alreadyHeld = "already"

// renderHold shows the hold page; card is the method last chosen, declined
// the booking whose payment the pay form was just told failed (or nil).
func (s *Store) renderHold(w http.ResponseWriter, r *http.Request, status int, h ledger.Hold, ev *seats.Event, v view, card string, declined *ledger.Booking) {
	if cur, err := s.cfg.Ledger.Hold(r.Context(), h.ID); err == nil {
		h = cur
	}
	if v.Text.Lang() == "" {
		v.Text = s.text(w, r)
	}
	now := s.now()
	p := holdPage{Hold: h, Event: ev.Event, Status: h.StatusAt(now), Seats: h.Seats, Key: uuid.NewString(),
		Cards: cardsOf(s.cfg.Provider), Card: card, ExpiresIn: max(int64(h.ExpiresAt.Sub(now)/time.Second), 0)}
	if h.Section != "" {
		p.Seats = []string{h.Section}
	}
	if p.Status == ledger.StatusPending || p.Status == ledger.StatusConfirmed {
		// A page shown again after the payment (Back, a reload, another
		// tab) says the seats are paid for, or being paid for, and leads
		// to the booking: never a pay form for seats already bought.
		if b, err := s.cfg.Ledger.Bookings().LiveOfHold(r.Context(), h.ID); err == nil {
			p.Booking = b.ID
			p.Paying = p.Status == ledger.StatusPending && b.Status == ledger.BookingPaymentPending
		}
	}
	p.Booked = p.Status == ledger.StatusConfirmed
	p.Payable = p.Status == ledger.StatusPending && s.cfg.Bookings != nil && !p.Paying
	if p.Card == "" && len(p.Cards) > 0 {
		p.Card = p.Cards[0].Token
	}
	if declined != nil && p.Payable {
		// The same watch as the failed booking's own page: telling the
		// buyer only to choose another card would have a second card
		// pay too if the first payment goes through after all.
		if left := failedWatch - now.Sub(declined.UpdatedAt); left > 0 {
			p.Declined, p.Recheck, p.RecheckEvery = declined.ID, int64(left/time.Second), failedRefreshSeconds
			if v.Error == "" && v.Notice == "" {
				v.Error = msg(v.Text, "shop_err_declined", "Reason", declineText(v.Text, declined.StatusReason))
			}
		}
	}
	title := "shop_hold_title"
	if p.Status != ledger.StatusPending {
		title = "shop_hold_ended_title"
	}
	if p.Status == ledger.StatusPending && !p.Paying {
		// Without the script, the page loads again once the hold ends,
		// to say so; with it, the countdown does.
		v.Refresh, v.RefreshTo = int(p.ExpiresIn)+1, "/holds/"+h.ID
	}
	switch {
	case p.Booked:
		title = "shop_hold_booked_title"
		if v.Error == "" && v.Notice == "" {
			v.Notice = msg(v.Text, "shop_hold_booked")
		}
	case p.Paying && v.Error == "" && v.Notice == "":
		v.Notice = msg(v.Text, "shop_hold_paying")
	case p.Status == ledger.StatusExpired && v.Error == "":
		v.Error = msg(v.Text, "shop_err_hold_expired")
	case p.Status == ledger.StatusReleased && v.Error == "":
		// Given back (here, in another tab, or by the API): the page says
		// so rather than leave "your seats are held" standing alone.
		v.Notice = msg(v.Text, "shop_released")
	case p.Status != ledger.StatusPending && v.Error == "":
		v.Error = msg(v.Text, "shop_err_hold_gone")
	case s.cfg.Bookings == nil && v.Error == "":
		v.Error = msg(v.Text, "shop_err_payments_off")
	}
	v.Title, v.Data = msg(v.Text, title), p
	s.render(w, r, status, "hold", v)
}

// Giving seats back and cancelling a booking cannot be undone: in a busy
// sale the seats are someone else's a moment later. Their buttons lead to
// a page that asks first, and the forms act only with that page's answer,
// so a tap that missed its button loses nothing.
const (
	confirmField = "confirm"
	confirmYes   = "yes"
)

// confirmPage asks whether to do what cannot be undone.
type confirmPage struct {
	Note, Action, Button, Keep, Back string
}

func confirmed(r *http.Request) bool { return r.PostForm.Get(confirmField) == confirmYes }

func (s *Store) handleReleaseAsk(w http.ResponseWriter, r *http.Request) {
	if h, _, ok := s.ownHold(w, r); ok {
		s.askRelease(w, r, h)
	}
}

// askRelease asks whether to give the hold's seats back; a hold that is
// no longer there to give back leads to its page, which says why.
func (s *Store) askRelease(w http.ResponseWriter, r *http.Request, h ledger.Hold) {
	back := "/holds/" + h.ID
	if h.StatusAt(s.now()) != ledger.StatusPending {
		seeOther(w, r, back)
		return
	}
	s.ask(w, r, "shop_release", back, back+"/release")
}

// ask renders the page that asks before an action that cannot be undone:
// its text is the catalog's <what>_ask, _ask_note, _yes and _keep; yes
// posts to action, keep goes back.
func (s *Store) ask(w http.ResponseWriter, r *http.Request, what, back, action string) {
	t := s.text(w, r)
	s.render(w, r, http.StatusOK, "confirm", view{Text: t, Title: msg(t, what+"_ask"), Data: confirmPage{
		Note: msg(t, what+"_ask_note"), Action: action, Button: msg(t, what+"_yes"),
		Keep: msg(t, what+"_keep"), Back: back}})
}

func (s *Store) handleRelease(w http.ResponseWriter, r *http.Request) {
	h, ev, ok := s.ownHold(w, r)
	if !ok {
		return
	}
	if !confirmed(r) {
		s.askRelease(w, r, h)
		return
	}
	err := s.cfg.Seats.ReleaseHold(detached(r), h)
	switch {
	case errors.Is(err, ledger.ErrHoldNotActive):
		t := s.text(w, r)
		why := "shop_err_hold_gone"
		if cur, err := s.cfg.Ledger.Hold(r.Context(), h.ID); err == nil && cur.Status == ledger.StatusConfirmed {
			why = "shop_err_hold_booked"
		}
		s.renderHold(w, r, http.StatusConflict, h, ev, view{Text: t, Error: msg(t, why)}, "", nil)
	case err != nil:
		t := s.text(w, r)
		s.renderHold(w, r, http.StatusServiceUnavailable, h, ev, view{Text: t, Error: msg(t, "shop_err_unavailable")}, "", nil)
	default:
		seeOther(w, r, "/events/"+strconv.FormatInt(h.EventID, 10)+"?released=1")
	}
}

// handlePay takes the pay form: a booking of the hold, charged at once.
func (s *Store) handlePay(w http.ResponseWriter, r *http.Request) {
	h, ev, ok := s.ownHold(w, r)
	if !ok {
		return
	}
	t := s.text(w, r)
	f := r.PostForm
	method := f.Get("card")
	again := func(status int, id string, data ...any) {
		s.renderHold(w, r, status, h, ev, view{Text: t, Error: msg(t, id, data...)}, method, nil)
	}
	if s.cfg.Bookings == nil {
		again(http.StatusServiceUnavailable, "shop_err_payments_off")
		return
	}
	key := f.Get("key")
	if !validKey(key) || !slices.ContainsFunc(cardsOf(s.cfg.Provider), func(c card) bool { return c.Token == method }) {
		again(http.StatusBadRequest, "shop_err_form")
		return
	}
	ctx := detached(r)
	res := s.cfg.Bookings.Create(ctx, booking.Request{Event: ev, Hold: h, User: h.UserID, Key: key, Method: method,
		Digest: idem.RequestDigest("storefront\x00" + h.ID + "\x00" + method)})
	switch res.Outcome {
	case booking.Created, booking.Replayed, booking.Existing, booking.Declined:
		b := res.Booking
		if cur, err := s.cfg.Ledger.Booking(ctx, b.ID); err == nil {
			b = cur
		}
		if b.Status == ledger.BookingFailed {
			s.renderHold(w, r, http.StatusPaymentRequired, h, ev,
				view{Text: t, Error: msg(t, "shop_err_declined", "Reason", declineText(t, b.StatusReason))}, method, &b)
			return
		}
		seeOther(w, r, "/bookings/"+b.ID)
	default:
		no := refusalOf(bookingRefusals, res.Outcome)
		again(no.status, no.msg)
	}
}

// declineText is a failed payment's reason in the buyer's words: a
// message of its own for the reasons providers give most often, a general
// one for any other. The provider's code stays for the staff (the API, the
// ledger, the logs).
func declineText(t locale.Text, reason string) string {
	if reason != "" {
		if m, err := t.T("shop_decline_" + reason); err == nil {
			return m
		}
	}
	return msg(t, "shop_decline_other")
}

// bookingRefusals are the pay form's refusals (docs/api.md §16); a
// declined card is a booking, failed.
var bookingRefusals = map[booking.Outcome]refusal{
	booking.HoldExpired:   {http.StatusGone, "shop_err_hold_expired"},
	booking.HoldNotActive: {http.StatusConflict, "shop_err_hold_gone"},
	booking.KeyReused:     {http.StatusUnprocessableEntity, "shop_err_form"},
}

// A booking: its status until it settles, its tickets, its cancellation.

type bookingPage struct {
	Booking ledger.Booking
	Event   ledger.Event
	Tickets []ticketView
	// Settling: the page reloads itself until the payment or the refund
	// settles.
	Settling bool
	// Failure: why the payment failed, in words.
	Failure string
	// Rechecking: the payment failed a moment ago, and the page reloads
	// itself for a while in case the provider changes its mind.
	Rechecking bool
	// Ended: why a cancelled or refunded booking ended, in words ("" when
	// the storefront has none for its reason).
	Ended string
	// PayAgain: the booking's hold is still the buyer's to pay.
	PayAgain bool
	// LetIn: a gate let a ticket of the booking in; it can no longer be
	// cancelled.
	LetIn bool
}

// endedReasons are the reasons a booking ends cancelled or refunded that a
// buyer is told in words (shop_ended_<reason>); the others need none.
var endedReasons = []string{
	booking.ReasonCancelled, booking.ReasonLateSoldOut, booking.ReasonLatePerUserLimit,
	booking.ReasonPaidAfterFailure, booking.ReasonNoSeatLeft, booking.ReasonRefundedAtProvider,
	booking.ReasonPaymentMismatch,
}

type ticketView struct {
	Seat, QR string
}

func ticketsOf(ts []ledger.Ticket) []ticketView {
	out := make([]ticketView, 0, len(ts))
	for _, t := range ts {
		seat := t.SeatID
		if seat == "" {
			seat = "#" + strconv.FormatInt(t.Seat, 10)
		}
		out = append(out, ticketView{Seat: seat, QR: "/v1/tickets/" + t.Code + ".png"})
	}
	return out
}

func (s *Store) ownBooking(w http.ResponseWriter, r *http.Request) (ledger.Booking, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, http.StatusNotFound, "shop_err_not_found")
		return ledger.Booking{}, false
	}
	b, err := s.cfg.Ledger.Booking(r.Context(), id.String())
	if err != nil {
		s.lookupFailed(w, r, err)
		return ledger.Booking{}, false
	}
	if !s.buyerOf(w, r, b.EventID).owns(b.UserID) {
		s.fail(w, r, http.StatusNotFound, "shop_err_not_found")
		return ledger.Booking{}, false
	}
	return b, true
}

func (s *Store) handleBooking(w http.ResponseWriter, r *http.Request) {
	b, ok := s.ownBooking(w, r)
	if !ok {
		return
	}
	s.renderBooking(w, r, http.StatusOK, b, view{})
}

// refreshSeconds is how often a settling booking's page reloads.
const refreshSeconds = 2

// A provider may report a payment failed and then, a few seconds or
// minutes later, succeeded (an asynchronous authentication; the booking is
// then confirmed, docs/payments.md). A failed booking's page keeps
// checking, every failedRefreshSeconds, until failedWatch after the
// failure, so the buyer who waits there sees it confirmed.
const (
	failedRefreshSeconds = 5
	failedWatch          = 3 * time.Minute
)

func (s *Store) renderBooking(w http.ResponseWriter, r *http.Request, status int, b ledger.Booking, v view) {
	ctx := r.Context()
	if v.Text.Lang() == "" {
		v.Text = s.text(w, r)
	}
	p := bookingPage{Booking: b, Settling: b.Status == ledger.BookingPaymentPending || b.RefundStatus == ledger.RefundPending}
	if ev, err := s.cfg.Seats.Registry().Event(ctx, b.EventID); err == nil {
		p.Event = ev.Event
	}
	if b.Status == ledger.BookingFailed {
		p.Failure = declineText(v.Text, b.StatusReason)
		p.Rechecking = s.now().Sub(b.UpdatedAt) < failedWatch
	}
	if (b.Status == ledger.BookingCancelled || b.Status == ledger.BookingRefunded) && slices.Contains(endedReasons, b.StatusReason) {
		p.Ended = msg(v.Text, "shop_ended_"+b.StatusReason)
		// A payment of the wrong amount leaves the hold as it was: while it
		// lasts, the buyer may pay its price.
		if b.StatusReason == booking.ReasonPaymentMismatch {
			h, err := s.cfg.Ledger.Hold(ctx, b.HoldID)
			p.PayAgain = err == nil && h.StatusAt(s.now()) == ledger.StatusPending
		}
	}
	if b.Status == ledger.BookingConfirmed {
		ts, err := s.cfg.Ledger.TicketsOf(ctx, b.ID)
		if err != nil {
			s.fail(w, r, http.StatusServiceUnavailable, "shop_err_unavailable")
			return
		}
		p.Tickets = ticketsOf(ts)
		if p.LetIn, err = s.cfg.Ledger.Bookings().LetIn(ctx, b.ID); err != nil {
			s.fail(w, r, http.StatusServiceUnavailable, "shop_err_unavailable")
			return
		}
	}
	switch {
	case p.Settling:
		v.Refresh = refreshSeconds
	case p.Rechecking:
		v.Refresh = failedRefreshSeconds
	}
	s.cfg.Confirmed(w.Header(), b.Status)
	v.Title, v.Data = msg(v.Text, "shop_booking_title"), p
	s.render(w, r, status, "booking", v)
}

func (s *Store) handleCancelAsk(w http.ResponseWriter, r *http.Request) {
	if b, ok := s.ownBooking(w, r); ok {
		s.askCancel(w, r, b)
	}
}

// askCancel asks whether to cancel the booking; one that cannot be
// cancelled leads to its page, which says why.
func (s *Store) askCancel(w http.ResponseWriter, r *http.Request, b ledger.Booking) {
	back := "/bookings/" + b.ID
	if b.Status != ledger.BookingConfirmed || s.cfg.Bookings == nil {
		seeOther(w, r, back)
		return
	}
	letIn, err := s.cfg.Ledger.Bookings().LetIn(r.Context(), b.ID)
	switch {
	case err != nil:
		s.fail(w, r, http.StatusServiceUnavailable, "shop_err_unavailable")
		return
	case letIn:
		seeOther(w, r, back)
		return
	}
	s.ask(w, r, "shop_cancel", back, back+"/cancellation")
}

func (s *Store) handleCancel(w http.ResponseWriter, r *http.Request) {
	b, ok := s.ownBooking(w, r)
	if !ok {
		return
	}
	t := s.text(w, r)
	if s.cfg.Bookings == nil {
		s.renderBooking(w, r, http.StatusServiceUnavailable, b, view{Text: t, Error: msg(t, "shop_err_payments_off")})
		return
	}
	if !confirmed(r) {
		s.askCancel(w, r, b)
		return
	}
	_, err := s.cfg.Bookings.Cancel(detached(r), b.ID)
	switch {
	case errors.Is(err, booking.ErrBookingLetIn):
		s.renderBooking(w, r, http.StatusConflict, b, view{Text: t, Error: msg(t, "shop_let_in")})
	case errors.Is(err, booking.ErrBookingNotCancellable):
		s.renderBooking(w, r, http.StatusConflict, b, view{Text: t, Error: msg(t, "shop_err_not_cancellable")})
	case err != nil:
		s.log.Warn("storefront: cancellation failed", "booking", b.ID, "error", err)
		s.renderBooking(w, r, http.StatusServiceUnavailable, b, view{Text: t, Error: msg(t, "shop_err_unavailable")})
	default:
		seeOther(w, r, "/bookings/"+b.ID)
	}
}

// My tickets: every booking of the buyer, in every event.

type ticketsPage struct{ Bookings []bookingItem }

type bookingItem struct {
	Booking ledger.Booking
	Event   string
	Tickets []ticketView
}

func (s *Store) handleMyTickets(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	b := s.buyerOf(w, r, 0)
	t := s.text(w, r)
	var p ticketsPage
	if len(b.subjects) > 0 {
		evs, err := s.cfg.Seats.Registry().LoadEvents(ctx)
		if err != nil {
			s.fail(w, r, http.StatusServiceUnavailable, "shop_err_unavailable")
			return
		}
		for _, ev := range evs {
			for _, user := range b.subjects {
				tr, err := s.cfg.Ledger.Trail(ctx, ev.ID, user)
				if err != nil {
					s.fail(w, r, http.StatusServiceUnavailable, "shop_err_unavailable")
					return
				}
				for _, bk := range tr.Bookings {
					item := bookingItem{Booking: bk, Event: ev.Name}
					for _, tk := range tr.Tickets {
						if tk.BookingID == bk.ID && tk.Valid {
							item.Tickets = append(item.Tickets, ticketsOf([]ledger.Ticket{tk.Ticket})...)
						}
					}
					p.Bookings = append(p.Bookings, item)
				}
			}
		}
	}
	slices.SortFunc(p.Bookings, func(a, b bookingItem) int { return b.Booking.CreatedAt.Compare(a.Booking.CreatedAt) })
	s.render(w, r, http.StatusOK, "tickets", view{Text: t, Title: msg(t, "shop_my_tickets"), Data: p})
}
