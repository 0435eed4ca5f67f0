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
// # Webhooks
//
// Both providers send Stripe's event format, signed with Stripe's scheme:
//
//	Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>
//
// VerifyWebhook (behind Provider.ParseWebhook) checks the signature with
// stripe-go's webhook package and the 300 s tolerance against the injected
// clock, then reads the event: its id (the deduplication key: webhooks come
// at least once), type, data.object.id (the payment) and
// data.object.metadata.booking_id. Types other than payment_intent.succeeded,
// payment_intent.payment_failed and charge.refunded parse with Kind
// KindOther, to be acknowledged and ignored.
//
// # Fakepay
//
// Fakepay takes Stripe's test payment-method names: pm_card_visa succeeds,
// pm_card_chargeDeclined is declined, pm_fakepay_silent succeeds without a
// webhook; unknown tokens are declined with a reason naming them. It honours
// idempotency keys like Stripe, can add latency, failures before the charge
// and timeouts after it, and delivers each event at least once to its
// webhook URL: duplicated, delayed, out of order, retried with backoff until
// answered 2xx. Pause, Resume, Redeliver and DeliverAfter let tests decide
// when a payment's webhook lands.
package payment
