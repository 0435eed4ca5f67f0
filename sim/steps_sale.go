package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
)

// holdBody is what a hold asks for, by the sale's kind and the step's
// shape: a quantity, seats by id (Qty consecutive seats of the map from
// Sel), the best available in a section, or a general-admission section's
// places.
func (w *world) holdBody(sl *sale, s Step) map[string]any {
	q := s.Qty
	if !sl.seated {
		return map[string]any{"quantity": q}
	}
	sections := append(append([]string(nil), sl.reservedSections...), gaIDs(sl)...)
	switch s.Shape % shapes {
	case ShapeSeatIDs:
		if len(sl.seatIDs) == 0 {
			break
		}
		var ids []string
		for i := range min(q, len(sl.seatIDs)) {
			ids = append(ids, sl.seatIDs[(s.Sel+i)%len(sl.seatIDs)])
		}
		return map[string]any{"seat_ids": ids}
	case ShapeBest:
		return map[string]any{"best_available": map[string]any{"section": sections[s.Sel%len(sections)], "quantity": q}}
	case ShapeSection:
		if ga := gaIDs(sl); len(ga) > 0 {
			return map[string]any{"section": ga[s.Sel%len(ga)], "quantity": q}
		}
	}
	return map[string]any{"quantity": q}
}

func gaIDs(sl *sale) []string {
	var out []string
	for _, sec := range sl.gaSections {
		out = append(out, sec.ID)
	}
	return out
}

// canonical is a body's form for comparing requests (maps marshal sorted):
// best_available of a general-admission section is the same request as
// that section's quantity (API.md §15).
func canonical(body map[string]any) string {
	if b, ok := body["best_available"].(map[string]any); ok {
		if sec, _ := b["section"].(string); strings.HasPrefix(sec, "GA-") {
			body = map[string]any{"section": sec, "quantity": b["quantity"]}
		}
	}
	if ids, ok := body["seat_ids"].([]string); ok {
		// The canonical request is the sorted seat list.
		ids = append([]string(nil), ids...)
		sort.Strings(ids)
		body = map[string]any{"seat_ids": ids}
	}
	raw, _ := json.Marshal(body)
	return string(raw)
}

// otherBody is another request than body, for a key reused with another
// body: the quantity changed, or seats asked by quantity instead.
func otherBody(body map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range body {
		out[k] = v
	}
	switch {
	case out["quantity"] != nil:
		out["quantity"] = out["quantity"].(int)%4 + 1
	case out["seat_ids"] != nil:
		return map[string]any{"quantity": len(out["seat_ids"].([]string))%4 + 1}
	case out["best_available"] != nil:
		b := out["best_available"].(map[string]any)
		out["best_available"] = map[string]any{"section": b["section"], "quantity": b["quantity"].(int)%4 + 1}
	}
	return out
}

// rebuild: one node reloads an event's inventory from the ledger while
// the sale goes on.
func (w *world) rebuild(s Step, n *node) *violation {
	sl := w.sales[s.Sel%len(w.sales)]
	ctx, cancel := w.passCtx()
	defer cancel()
	start := time.Now()
	var err error
	w.io(func() { _, err = n.srv.Rebuild(ctx, sl.id) })
	if err != nil {
		w.stats.passErrors++
		w.markTrouble()
	}
	if time.Since(start) >= requestTimeout {
		return violated("liveness", "rebuild did not end within %s", requestTimeout)
	}
	return nil
}

// scan shows a ticket (Sel among the run's, valid or not) at a device of
// its event, or with Qty 1 and two events, of the other's (User chooses
// which of its two), as the step's mode says.
func (w *world) scan(s Step, n *node) *violation {
	ctx, cancel := w.passCtx()
	var events []int64
	for _, sl := range w.sales {
		events = append(events, sl.id)
	}
	var tickets []ticketRow
	var err error
	w.io(func() { tickets, err = readTickets(ctx, w.oracle, events) })
	cancel()
	if err != nil || len(tickets) == 0 {
		return nil
	}
	t := tickets[s.Sel%len(tickets)]
	sl := w.saleOf(t.event)
	if s.Qty == 1 && len(w.sales) > 1 {
		sl = w.sales[(sl.idx+1)%len(w.sales)]
	}
	d := sl.devices[s.User%len(sl.devices)]
	now := w.clock.Now().UTC()
	body := map[string]any{"code": t.code}
	auth := d.token
	switch s.Mode % scanModes {
	case ScanShared:
		auth = gateToken
		body["gate"] = d.gate
		// The contract of API.md §12: a shared-token scan names its
		// event.
		body["event"] = sl.id
	case ScanOffline:
		at := now.Add(-time.Duration(s.Sel%30) * time.Second)
		if at.Before(t.issuedAt) {
			at = t.issuedAt.Add(time.Millisecond)
		}
		body["scanned_at"] = at.Format(time.RFC3339Nano)
	case ScanBackdated:
		w.stats.fault("scan-backdated")
		body["scanned_at"] = t.issuedAt.Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	}
	if sl.id != t.event {
		w.stats.fault("scan-wrong-event")
	}
	revoked := d.revoked && s.Mode%scanModes != ScanShared
	a := w.call(n, http.MethodPost, "/v1/scans", body, map[string]string{"Authorization": "Bearer " + auth})
	if v := answered("scan", a); v != nil {
		return v
	}
	if revoked && a.status != http.StatusUnauthorized && a.status != http.StatusServiceUnavailable {
		return violated("gate-revoked", "a scan by revoked device %s answered %d: %s", d.gate, a.status, a.body)
	}
	return nil
}

// revoke revokes a gate device (Sel among every sale's).
func (w *world) revoke(s Step, n *node) *violation {
	var all []*device
	for _, sl := range w.sales {
		all = append(all, sl.devices...)
	}
	d := all[s.Sel%len(all)]
	a := w.call(n, http.MethodPost, "/v1/admin/gate-devices/"+d.id+"/revocation", nil, map[string]string{"Authorization": "Bearer " + adminToken})
	if v := answered("revocation", a); v != nil {
		return v
	}
	if a.status == http.StatusOK {
		d.revoked = true
	}
	return nil
}

// voidRead reads a device's void feed from its cursor: every ticket it
// gives is void in the ledger, and none is given twice.
func (w *world) voidRead(s Step, n *node) *violation {
	var all []*device
	for _, sl := range w.sales {
		all = append(all, sl.devices...)
	}
	d := all[s.Sel%len(all)]
	q := url.Values{"event": {fmt.Sprint(d.sale.id)}}
	cursor, revoked := d.cursor, d.revoked
	if cursor != "" {
		q.Set("since", cursor)
	}
	a := w.call(n, http.MethodGet, "/v1/scans/void?"+q.Encode(), nil, map[string]string{"Authorization": "Bearer " + d.token})
	if v := answered("void feed", a); v != nil {
		return v
	}
	if d.cursor != cursor {
		// Another read of the device's feed moved its cursor meanwhile:
		// this one read the same page.
		return nil
	}
	if revoked && a.status != http.StatusUnauthorized && a.status != http.StatusServiceUnavailable {
		return violated("gate-revoked", "revoked device %s read the void feed: %d", d.gate, a.status)
	}
	if a.status != http.StatusOK {
		return nil
	}
	var feed struct {
		Tickets []struct {
			Code string `json:"code"`
		} `json:"tickets"`
		Next string `json:"next"`
	}
	if err := json.Unmarshal(a.body, &feed); err != nil || feed.Next == "" {
		return violated("api", "void feed answered %s", a.body)
	}
	var codes []string
	for _, t := range feed.Tickets {
		if d.voided[t.Code] {
			return violated("void-feed", "device %s was given ticket %s twice", d.gate, t.Code)
		}
		d.voided[t.Code] = true
		codes = append(codes, t.Code)
	}
	d.cursor = feed.Next
	if len(codes) == 0 {
		return nil
	}
	ctx, cancel := w.passCtx()
	defer cancel()
	valid, err := readValid(ctx, w.oracle, codes)
	if err != nil {
		return violated("oracle", "read tickets: %v", err)
	}
	for c := range valid {
		return violated("void-feed", "the void feed gave ticket %s, valid in the ledger", c)
	}
	return nil
}

// succeeded lists the payments the provider captured for the origin's
// bookings, in the order of the bookings.
func (w *world) succeeded() []payment.Payment {
	var paid []payment.Payment
	for _, id := range w.fp.all() {
		for _, p := range w.fp.PaymentsForBooking(id) {
			if p.Status == payment.StatusSucceeded && !w.foreignPays[p.ID] {
				paid = append(paid, p)
			}
		}
	}
	return paid
}

// providerRefund: the provider refunds a third or all of a payment from its
// dashboard (in pending mode, of one whose refunds stay pending), refuses
// its refunds from now on, or has a payment its booking has not been
// confirmed for changed to half its amount.
func (w *world) providerRefund(s Step) {
	paid := w.succeeded()
	if s.Mode%providerModes == ProviderPending {
		var slow []payment.Payment
		for _, p := range paid {
			if w.slowRefunds[p.ID] {
				slow = append(slow, p)
			}
		}
		paid = slow
	}
	p, ok := pick(paid, s.Sel)
	if !ok {
		return
	}
	switch s.Mode % providerModes {
	case ProviderPending:
		amount := int64(0)
		if s.Sel%2 == 1 {
			amount = max(p.Amount/3, 1)
		}
		if _, err := w.fp.RefundAtProvider(p.ID, amount); err == nil {
			w.stats.fault("provider-refund-pending")
			w.providerRefunds[p.BookingID] = true
		}
	case ProviderAmend:
		ctx, cancel := w.passCtx()
		defer cancel()
		b, err := w.oracle.Booking(ctx, p.BookingID)
		if err != nil || b.Status == ledger.BookingConfirmed || p.Amount < 2 {
			return
		}
		if w.fp.AmendAtProvider(p.ID, p.Amount/2, p.Currency) == nil {
			w.stats.fault("provider-amend")
			w.amended[p.ID] = true
		}
	case ProviderPartial:
		if _, err := w.fp.RefundAtProvider(p.ID, max(p.Amount/3, 1)); err == nil {
			w.stats.fault("provider-partial-refund")
			w.providerRefunds[p.BookingID] = true
		}
	case ProviderFull:
		if _, err := w.fp.RefundAtProvider(p.ID, 0); err == nil {
			w.stats.fault("provider-refund")
			w.providerRefunds[p.BookingID] = true
		}
	case ProviderRefuse:
		if w.fp.SetRefundsRefused(p.ID, true) == nil {
			w.stats.fault("refunds-refused")
		}
	}
}

// foreign: the provider announces a payment the origin never made, for a
// booking nobody knows or for one of the run's.
func (w *world) foreign(s Step) {
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", s.Sel)
	if s.Mode%foreignModes == ForeignKnown {
		if b, ok := pick(w.fp.all(), s.Sel); ok {
			id = b
		}
	}
	p := w.fp.ForeignPayment(id, 1000, "inr")
	w.foreignPays[p.ID] = true
	w.stats.fault("foreign-payment")
}

// burst delivers every queued event of h's booking at once, each to
// another node.
func (w *world) burst(s Step, h hook) *violation {
	var idx []int
	for j, q := range w.queue {
		if q.booking == h.booking {
			idx = append(idx, j)
		}
	}
	if len(idx) > 1 {
		w.stats.fault("webhook-burst")
	}
	hooks := make([]hook, len(idx))
	for k, j := range idx {
		hooks[k] = w.queue[j]
	}
	out := make([]answer, len(hooks))
	now := w.clock.Now()
	w.io(func() {
		done := make(chan struct{}, len(hooks))
		for k, q := range hooks {
			go func() {
				out[k] = w.deliverRaw(w.nodes[(s.Node+k)%len(w.nodes)], q, now)
				done <- struct{}{}
			}()
		}
		for range hooks {
			<-done
		}
	})
	delivered := map[string]bool{}
	for k, a := range out {
		if v := answered("webhook", a); v != nil {
			return v
		}
		if a.status == http.StatusOK {
			delivered[hooks[k].id] = true
		}
	}
	kept := w.queue[:0:0]
	for _, q := range w.queue {
		if !delivered[q.id] {
			kept = append(kept, q)
		}
	}
	w.queue = kept
	return checkWebhookAnswer(out...)
}
