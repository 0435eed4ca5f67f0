package sim

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/origin/payment"
)

// violation is a broken promise found by a step or a check.
type violation struct {
	// check names the invariant (shrinking keeps to the same one).
	check string
	msg   string
}

func (v *violation) Error() string { return v.check + ": " + v.msg }

func violated(check, format string, args ...any) *violation {
	return &violation{check: check, msg: fmt.Sprintf(format, args...)}
}

// exec runs one step and returns what it found broken, if anything.
func (w *world) exec(s Step) *violation {
	n := w.nodes[s.Node%len(w.nodes)]
	var v *violation
	switch s.Kind {
	case Admit:
		w.setWatermark(w.watermark + int64(s.Qty))
	case Hold:
		v = w.wrap(s, n, func() *violation { return w.hold(s, n) })
	case Release:
		v = w.wrap(s, n, func() *violation { return w.release(s, n) })
	case Book:
		v = w.wrap(s, n, func() *violation { return w.book(s, n) })
	case Cancel:
		v = w.wrap(s, n, func() *violation { return w.cancel(s, n) })
	case Webhook:
		v = w.wrap(s, n, func() *violation { return w.webhook(s, n) })
	case Reap, Reconcile, Resolve, PayRecon:
		v = w.wrap(s, n, func() *violation { return w.pass(s.Kind, n) })
	case Clock:
		w.clock.Advance(s.Dur)
	case RedisRestart:
		w.fault("redis-restart")
		if !w.redisDown {
			w.redis.Stop()
		}
		w.redis.Start()
		w.redisDown = false
		w.stateLost = true
	case RedisFlush:
		if !w.redisDown {
			w.fault("redis-flush")
			w.stateLost = true
			_ = w.direct.FlushAll(w.ctx).Err()
		}
	case RedisDown:
		if !w.redisDown {
			w.fault("redis-down")
			w.redis.Stop()
			w.redisDown = true
			w.stateLost = true
		}
	case PGDown:
		if !n.pgDown {
			w.fault("pg-down")
			n.pgProxy.Cut()
			n.pgDown = true
		}
	case Heal:
		w.heal()
	case Settle:
		v = w.settle(false)
	case RefundOutcome:
		w.refundOutcome(s)
	case Persist:
		v = w.persist(s, n)
	case Rebuild:
		v = w.wrap(s, n, func() *violation { return w.rebuild(s, n) })
	case Scan:
		v = w.scan(s, n)
	case Revoke:
		v = w.revoke(s, n)
	case VoidRead:
		v = w.voidRead(s, n)
	case ProviderRefund:
		w.providerRefund(s)
	case Foreign:
		w.foreign(s)
	}
	return v
}

// execGroup runs a group of steps: alone, or each in a goroutine of its
// own, started At after the group's start, with the model's lock passed
// between them (a step lets go of it while its requests are under way).
// It returns the first violation, by the steps' order.
func (w *world) execGroup(group []Step) *violation {
	if len(group) == 1 {
		v := w.exec(group[0])
		w.drainHooks()
		return v
	}
	w.stats.fault("concurrent-group")
	found := make([]*violation, len(group))
	var wg sync.WaitGroup
	w.big.Unlock()
	for i, s := range group {
		wg.Go(func() {
			if s.At > 0 {
				time.Sleep(s.At)
			}
			w.big.Lock()
			defer w.big.Unlock()
			found[i] = w.exec(s)
		})
	}
	wg.Wait()
	w.big.Lock()
	w.drainHooks()
	for _, v := range found {
		if v != nil {
			return v
		}
	}
	return nil
}

func (w *world) fault(kind string) {
	w.stats.fault(kind)
	w.markTrouble()
}

func (w *world) markTrouble() {
	w.mu.Lock()
	w.trouble = time.Now()
	w.mu.Unlock()
}

// wrap runs op under the step's fault.
func (w *world) wrap(s Step, n *node, op func() *violation) *violation {
	switch s.Wrap {
	case NoWrap:
		return op()
	case RedisReplyLost:
		if w.redisDown {
			return op()
		}
		w.fault(s.Wrap.String())
		n.redisProxy.StallReplies()
		defer n.redisProxy.Resume()
		return op()
	case PayFailure, PayTimeout:
		w.fault(s.Wrap.String())
		if s.Wrap == PayFailure {
			_ = w.fp.SetFaults(1, 0)
		} else {
			_ = w.fp.SetFaults(0, 1)
		}
		defer func() { _ = w.fp.SetFaults(0, 0) }()
		return op()
	case PGCutPaused, PGCutReplies, PGCutAfterRedis, PGStallAfterRedis:
		if n.pgDown {
			return op()
		}
		w.fault(s.Wrap.String())
		// cutting: the fault's hold on PostgreSQL has begun; the cut comes
		// Step.Dur after.
		cutting := make(chan struct{})
		switch s.Wrap {
		case PGCutPaused:
			n.pgProxy.Pause()
			close(cutting)
		case PGCutReplies:
			n.pgProxy.StallReplies()
			close(cutting)
		case PGCutAfterRedis, PGStallAfterRedis:
			// The inventory's changes are scripts; the first one the node
			// sends during the step cuts its PostgreSQL off.
			// The inventory's confirmation (a settlement) or hold: a
			// script called by its SHA-1, or sent whole.
			script := scriptConfirm
			if s.Wrap == PGStallAfterRedis {
				script = scriptHold
			}
			var once sync.Once
			var struck atomic.Bool
			n.redisProxy.OnSend(func(b []byte) {
				if script.calledIn(b) {
					once.Do(func() {
						struck.Store(true)
						n.pgProxy.Pause()
						close(cutting)
					})
				}
			})
			// Off before the step's end lets PostgreSQL go again. The
			// summary counts the faults that struck apart.
			run := op
			op = func() *violation {
				defer n.redisProxy.OnSend(nil)
				return run()
			}
			defer func() {
				if struck.Load() {
					w.fault(s.Wrap.String() + " (struck)")
				}
			}()
		}
		done := make(chan *violation, 1)
		go func() { done <- op() }()
		select {
		case v := <-done:
			n.pgProxy.Resume()
			return v
		case <-cutting:
		}
		select {
		case v := <-done:
			n.pgProxy.Resume()
			return v
		case <-time.After(s.Dur):
		}
		if s.Wrap == PGStallAfterRedis {
			n.pgProxy.Resume()
			return <-done
		}
		n.pgProxy.Cut()
		v := <-done
		n.pgProxy.Restore()
		n.pgProxy.Resume()
		return v
	}
	return nil
}

// inventoryScript names one of the inventory's Lua scripts as it reaches
// Redis: the SHA-1 of its source (EVALSHA), or its first line (EVAL, after
// NOSCRIPT).
type inventoryScript struct{ sha, head []byte }

var scriptConfirm, scriptHold = loadScript("confirm.lua"), loadScript("hold.lua")

// loadScript reads an inventory script's source beside this package's.
// Without it (a test binary moved away from its sources) any script call
// matches.
func loadScript(name string) inventoryScript {
	_, file, _, _ := runtime.Caller(0)
	src, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "inventory", name))
	if err != nil {
		return inventoryScript{}
	}
	sum := sha1.Sum(src)
	head, _, _ := bytes.Cut(src, []byte("\n"))
	return inventoryScript{sha: []byte(hex.EncodeToString(sum[:])), head: head}
}

// calledIn reports whether b, bytes a client sent Redis, calls the script.
func (sc inventoryScript) calledIn(b []byte) bool {
	l := bytes.ToLower(b)
	if !bytes.Contains(l, []byte("\r\nevalsha\r\n")) && !bytes.Contains(l, []byte("\r\neval\r\n")) {
		return false
	}
	return sc.sha == nil || bytes.Contains(l, sc.sha) || bytes.Contains(b, sc.head)
}

// answered checks what every answer must be: never a 500, never hung.
func answered(what string, a answer) *violation {
	switch {
	case a.stuck:
		return violated("liveness", "%s did not answer within %s", what, requestTimeout)
	case a.status >= 500 && a.status != http.StatusServiceUnavailable:
		return violated("no-500", "%s answered %d: %s", what, a.status, a.body)
	}
	return nil
}

func pick[T any](list []T, sel int) (T, bool) {
	var zero T
	if len(list) == 0 {
		return zero, false
	}
	return list[sel%len(list)], true
}

func (w *world) hold(s Step, n *node) *violation {
	u := w.users[s.User%len(w.users)]
	body := w.holdBody(u.sale, s)
	key := ""
	switch {
	case s.Mode == KeyReplay && u.holdKey != "":
		key, body = u.holdKey, u.holdBody
	case s.Mode == KeyOtherBody && u.holdKey != "":
		key = u.holdKey
		if canonical(body) == canonical(u.holdBody) {
			body = otherBody(body)
		}
	default:
		u.keys++
		key = fmt.Sprintf("hold-%s-%d", u.id, u.keys)
	}
	u.holdKey, u.holdBody = key, body
	headers := w.auth(u)
	headers["Idempotency-Key"] = key
	path := fmt.Sprintf("/v1/events/%d/holds", u.sale.id)
	answers := w.race(s, n, func(n *node) answer { return w.callRaw(n, http.MethodPost, path, body, headers) })
	for _, a := range answers {
		if v := answered("hold", a); v != nil {
			return v
		}
		if a.status != http.StatusCreated && a.status != http.StatusOK {
			continue
		}
		var h struct {
			HoldID   string `json:"hold_id"`
			Quantity int    `json:"quantity"`
			UserID   string `json:"user_id"`
		}
		if err := json.Unmarshal(a.body, &h); err != nil || h.HoldID == "" {
			return violated("api", "hold answered %d with %s", a.status, a.body)
		}
		if u.pos > w.maxWatermark {
			return violated("admission", "user at position %d got a hold (%d) though the watermark never passed %d", u.pos, a.status, w.maxWatermark)
		}
		if h.Quantity > w.setup.MaxPerUser || h.UserID != u.id {
			return violated("api", "hold for %s of %s answered %s", u.id, canonical(body), a.body)
		}
		// Only a key that made a hold is kept for good (in the hold's
		// row): what a 200 (the user's hold already) answered may be
		// forgotten with Redis.
		use, seen := w.holdKeys[key]
		bodyKey := canonical(body)
		switch {
		case !seen && a.status == http.StatusCreated:
			w.holdKeys[key] = keyUse{body: bodyKey, status: a.status, id: h.HoldID}
		case !seen:
		case use.body != bodyKey && a.status == http.StatusCreated:
			return violated("idempotency", "key %s first used for %s made a new hold for %s", key, use.body, bodyKey)
		case use.body == bodyKey && use.status == http.StatusCreated && a.status == http.StatusCreated && use.id != h.HoldID:
			return violated("idempotency", "key %s replayed made a second hold %s (first %s)", key, h.HoldID, use.id)
		}
		if !contains(u.holds, h.HoldID) {
			u.holds = append(u.holds, h.HoldID)
		}
	}
	return nil
}

// race sends a request once, or twice at once (to this node and the next)
// when the step races; send runs without the model's lock.
func (w *world) race(s Step, n *node, send func(*node) answer) []answer {
	if !s.Race {
		var a answer
		w.io(func() { a = send(n) })
		return []answer{a}
	}
	w.stats.fault("race")
	other := w.nodes[(s.Node+1)%len(w.nodes)]
	out := make([]answer, 2)
	w.io(func() {
		var wg sync.WaitGroup
		for i, m := range []*node{n, other} {
			wg.Go(func() { out[i] = send(m) })
		}
		wg.Wait()
	})
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// someone is the step's user if they have what the step acts on, else the
// next user who has: a step is rarely wasted.
func (w *world) someone(s Step, has func(*user) bool) *user {
	for i := range w.users {
		if u := w.users[(s.User+i)%len(w.users)]; has(u) {
			return u
		}
	}
	return w.users[s.User%len(w.users)]
}

func withHolds(u *user) bool    { return len(u.holds) > 0 }
func withBookings(u *user) bool { return len(u.bookings) > 0 }

func (w *world) release(s Step, n *node) *violation {
	u := w.someone(s, withHolds)
	id, ok := pick(u.holds, s.Sel)
	if !ok {
		return nil
	}
	return answered("release", w.call(n, http.MethodDelete, "/v1/holds/"+id, nil, w.auth(u)))
}

func (w *world) book(s Step, n *node) *violation {
	u := w.someone(s, withHolds)
	// Mostly the user's latest hold; now and then an older one.
	holdID, ok := pick(u.holds, s.Sel)
	if ok && s.Sel%4 != 0 {
		holdID = u.holds[len(u.holds)-1]
	}
	if !ok {
		return nil
	}
	pm := methods[s.Method%len(methods)]
	key := ""
	switch {
	case s.Mode == KeyReplay && u.bookKey != "":
		key, holdID, pm = u.bookKey, u.bookHold, u.bookPM
	case s.Mode == KeyOtherBody && u.bookKey != "":
		key, holdID = u.bookKey, u.bookHold
		if pm == u.bookPM {
			pm = methods[(s.Method+1)%len(methods)]
		}
	default:
		u.keys++
		key = fmt.Sprintf("book-%s-%d", u.id, u.keys)
	}
	u.bookKey, u.bookHold, u.bookPM = key, holdID, pm
	headers := w.auth(u)
	headers["Idempotency-Key"] = key
	body := map[string]string{"hold_id": holdID, "payment_method_token": pm}
	answers := w.race(s, n, func(n *node) answer { return w.callRaw(n, http.MethodPost, "/v1/bookings", body, headers) })
	for _, a := range answers {
		if v := answered("booking", a); v != nil {
			return v
		}
		if a.status != http.StatusAccepted && a.status != http.StatusOK {
			continue
		}
		var b struct {
			BookingID string `json:"booking_id"`
		}
		if err := json.Unmarshal(a.body, &b); err != nil || b.BookingID == "" {
			return violated("api", "booking answered %d with %s", a.status, a.body)
		}
		if v := bookKeyCheck(w.bookKeys, key, holdID+" "+pm, a.status, b.BookingID); v != nil {
			return v
		}
		if !contains(u.bookings, b.BookingID) {
			u.bookings = append(u.bookings, b.BookingID)
		}
	}
	return nil
}

// bookKeyCheck holds a booking answer (status, booking id) to what its
// Idempotency-Key first got, in keys, and remembers the key's first use.
// Only a key that made a booking is kept for good (in the booking's row):
// a 200 names a booking made with another key, and what it answered may
// be forgotten with Redis; once that booking has failed, the key may make
// one, with any body.
func bookKeyCheck(keys map[string]keyUse, key, bodyKey string, status int, id string) *violation {
	use, seen := keys[key]
	switch {
	case !seen && status == http.StatusAccepted:
		keys[key] = keyUse{body: bodyKey, status: status, id: id}
	case !seen:
	case use.body != bodyKey && status == http.StatusAccepted && id != use.id:
		return violated("idempotency", "key %s first used for %s made another booking for %s", key, use.body, bodyKey)
	case use.body == bodyKey && status == http.StatusAccepted && use.id != id:
		return violated("idempotency", "key %s replayed made a second booking %s (first %s)", key, id, use.id)
	}
	return nil
}

func (w *world) cancel(s Step, n *node) *violation {
	u := w.someone(s, withBookings)
	id, ok := pick(u.bookings, s.Sel)
	if !ok {
		return nil
	}
	return answered("cancellation", w.call(n, http.MethodPost, "/v1/bookings/"+id+"/cancellation", nil, w.auth(u)))
}

func (w *world) webhook(s Step, n *node) *violation {
	mode := s.Mode % webhookModes
	if mode == WebhookResend {
		id, ok := pick(w.fp.all(), s.Sel)
		if !ok {
			return nil
		}
		pays := w.fp.PaymentsForBooking(id)
		if len(pays) == 0 {
			return nil
		}
		w.stats.fault("webhook-resend")
		_ = w.fp.Redeliver(w.ctx, pays[len(pays)-1].ID)
		return nil
	}
	if len(w.queue) == 0 {
		return nil
	}
	i := s.Sel % len(w.queue)
	// A step beside others delivers the user's own events when it can: a
	// buyer's payment landing while the buyer acts; own delivers the
	// newest of them, or nothing.
	if s.Par || mode == WebhookOwn {
		u := w.users[s.User%len(w.users)]
		var mine []int
		for j, h := range w.queue {
			if contains(u.bookings, h.booking) {
				mine = append(mine, j)
			}
		}
		switch {
		case mode == WebhookOwn && len(mine) == 0:
			return nil
		case mode == WebhookOwn:
			i = mine[len(mine)-1]
		case len(mine) > 0:
			i = mine[s.Sel%len(mine)]
		}
	}
	h := w.queue[i]
	if i > 0 {
		w.stats.fault("webhook-reorder")
	}
	// Other steps of the group may change the queue while this one's
	// request is under way: the event is found again by its id.
	remove := func() {
		for j, q := range w.queue {
			if q.id == h.id {
				w.queue = append(w.queue[:j:j], w.queue[j+1:]...)
				return
			}
		}
	}
	switch mode {
	case WebhookDrop:
		if w.mustArrive(h) {
			return nil // the provider retries it until it lands
		}
		if h.typ == "charge.refunded" && w.providerRefunds[h.booking] {
			// Lost while the origin asks about the booking's refunds.
			w.stats.fault("provider-refund-news-lost")
		} else {
			w.stats.fault("webhook-lost")
		}
		remove()
		return nil
	case WebhookBurst:
		return w.burst(s, h)
	case WebhookDuplicate:
		w.stats.fault("webhook-duplicate")
		now := w.clock.Now()
		answers := w.race(Step{Node: s.Node, Race: true}, n, func(n *node) answer { return w.deliverRaw(n, h, now) })
		ok := false
		for _, a := range answers {
			if v := answered("webhook", a); v != nil {
				return v
			}
			ok = ok || a.status == http.StatusOK
		}
		if ok {
			remove()
		}
		return checkWebhookAnswer(answers...)
	case WebhookKeep:
		w.stats.fault("webhook-duplicate")
		a := w.deliver(n, h)
		if v := answered("webhook", a); v != nil {
			return v
		}
		return checkWebhookAnswer(a)
	}
	a := w.deliver(n, h)
	if v := answered("webhook", a); v != nil {
		return v
	}
	if a.status == http.StatusOK {
		remove()
	}
	return checkWebhookAnswer(a)
}

// checkWebhookAnswer: a signed event from the provider is never refused
// as badly signed.
func checkWebhookAnswer(as ...answer) *violation {
	for _, a := range as {
		if a.status == http.StatusBadRequest {
			return violated("api", "a webhook fakepay signed was refused: %s", a.body)
		}
	}
	return nil
}

// persist books the user's latest hold with a declined card Qty times,
// the clock moving Dur between attempts, checking after each.
func (w *world) persist(s Step, n *node) *violation {
	u := w.someone(s, withHolds)
	if len(u.holds) == 0 {
		return nil
	}
	holdID := u.holds[len(u.holds)-1]
	for range s.Qty {
		u.keys++
		headers := w.auth(u)
		headers["Idempotency-Key"] = fmt.Sprintf("book-%s-%d", u.id, u.keys)
		a := w.call(n, http.MethodPost, "/v1/bookings", map[string]string{"hold_id": holdID, "payment_method_token": methods[1]}, headers)
		if v := answered("booking", a); v != nil {
			return v
		}
		if a.status != http.StatusAccepted {
			return nil
		}
		var b struct {
			BookingID string `json:"booking_id"`
		}
		if json.Unmarshal(a.body, &b) == nil && b.BookingID != "" && !contains(u.bookings, b.BookingID) {
			u.bookings = append(u.bookings, b.BookingID)
		}
		if v := w.check(); v != nil {
			return v
		}
		w.clock.Advance(s.Dur)
	}
	return nil
}

// refundOutcome plays the provider's side of refunds that do not end at
// once: a payment's refunds from now on stay pending, or a pending one
// ends, succeeded or failed, with its webhooks (queued like the others).
func (w *world) refundOutcome(s Step) {
	var paid []payment.Payment
	for _, id := range w.fp.all() {
		for _, p := range w.fp.PaymentsForBooking(id) {
			if p.Status == payment.StatusSucceeded {
				paid = append(paid, p)
			}
		}
	}
	if s.Mode%refundModes == RefundsPending {
		if p, ok := pick(paid, s.Sel); ok && w.fp.SetRefundOutcome(p.ID, payment.RefundPending) == nil {
			w.stats.fault("refund-pending")
			w.slowRefunds[p.ID] = true
		}
		return
	}
	var pending []payment.Refund
	for _, p := range paid {
		for _, r := range w.fp.RefundsForPayment(p.ID) {
			if r.Status == payment.RefundPending {
				pending = append(pending, r)
			}
		}
	}
	r, ok := pick(pending, s.Sel)
	if !ok {
		return
	}
	end, kind := payment.RefundSucceeded, "refund-succeeded-late"
	if s.Mode%refundModes == RefundFails {
		end, kind = payment.RefundFailed, "refund-failed-late"
	}
	if w.fp.SettleRefund(r.ID, end) == nil {
		w.stats.fault(kind)
	}
}

func (w *world) pass(k Kind, n *node) *violation {
	ctx, cancel := w.passCtx()
	defer cancel()
	start := time.Now()
	var err error
	w.io(func() {
		switch k {
		case Reap:
			_, err = n.srv.ReapOnce(ctx)
		case Reconcile:
			err = n.srv.ReconcileOnce(ctx)
		case Resolve:
			_, err = n.srv.ResolveUncertain(ctx)
		case PayRecon:
			_, err = n.srv.ReconcilePaymentsOnce(ctx)
		}
	})
	took := time.Since(start)
	if err != nil {
		w.stats.passErrors++
		w.markTrouble()
	}
	if took >= requestTimeout {
		return violated("liveness", "%s pass did not end within %s", k, requestTimeout)
	}
	return nil
}
