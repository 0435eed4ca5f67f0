// Package payment is the origin's payment providers: a Provider interface the
// booking flow charges, refunds and verifies webhooks through, the Stripe
// adapter (PaymentIntents on stripe-go), and fakepay, an in-process simulated
// provider for the demo, the load generator and tests.
//
// # Money moves once
//
// Every call that moves money carries an idempotency key derived from the
// booking (PaymentKey, RefundKey). A call that fails with ErrAmbiguous may
// still have charged or refunded: the caller retries with the same key, which
// returns the first result and never moves money twice, or waits for the
// webhook. Declines are *DeclineError (errors.Is ErrDeclined) and come with
// the failed payment's id.
//
// A refund that answers is not a refund done: its Status is pending,
// succeeded or failed (Stripe's canceled counts as failed), and a pending or
// even a succeeded refund may fail later. GetRefund reads its current state.
// A failed refund is final under its key, so trying again is a new refund
// under RefundAttemptKey(booking, n).
//
// # Webhooks
//
// Both providers send Stripe's event format, signed with Stripe's scheme:
//
//	Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>
//
// VerifyWebhook (behind Provider.ParseWebhook) checks the signature with
// stripe-go's webhook package and the 300 s tolerance against the injected
// clock, then reads the event: its id (the deduplication key: webhooks come
// at least once), type, the payment (data.object.id, or the payment_intent
// of a charge or a refund), data.object.metadata.booking_id, and for refund
// events the refund's id and status. A header with more than one t= element
// is refused: stripe-go checks the signature against the last one, so any
// other could carry a fresh time in front of an old signed event. Types
// other than payment_intent.succeeded, payment_intent.payment_failed,
// charge.refunded, refund.created, refund.updated, refund.failed and
// charge.refund.updated parse with Kind KindOther, to be acknowledged and
// ignored.
//
// # Fakepay
//
// Fakepay takes Stripe's test payment-method names: pm_card_visa succeeds,
// pm_card_chargeDeclined is declined, pm_fakepay_silent succeeds without a
// webhook, pm_fakepay_refund_fails succeeds and every refund of it fails
// (with a refund.failed webhook), pm_fakepay_refund_refused succeeds and
// every refund of it is refused as invalid, pm_fakepay_fail_then_succeed is
// declined and then, FlipAfter later by the provider's clock, succeeds,
// with both webhooks; unknown tokens are declined with a reason naming
// them. RefundAtProvider, SetRefundsRefused and ForeignPayment act as a
// provider can without being asked. SetRefundOutcome and SettleRefund make a payment's refunds
// fail, succeed or stay pending and end later, and Money sums what it
// really moved, to hold a ledger's account against. It honours
// idempotency keys like Stripe, can add latency, failures before the charge
// and timeouts after it, and delivers each event at least once to its
// webhook URL: duplicated, delayed, out of order, retried with backoff until
// answered 2xx. Pause, Resume, Redeliver and DeliverAfter let tests decide
// when a payment's webhook lands.
package payment
