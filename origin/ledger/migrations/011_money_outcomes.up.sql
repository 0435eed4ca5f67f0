-- Every payment taken ends as a sale or a refund, whatever its history.

-- One live booking per hold. A booking whose payment failed and then
-- succeeded anyway is refunded (cancelled) while the buyer may be paying
-- through another booking of the same hold: only the bookings that can
-- still become or are a sale count, or the refund of the first would
-- collide with the second.
DROP INDEX bookings_one_per_hold;
CREATE UNIQUE INDEX bookings_one_per_hold ON bookings (hold_id) WHERE status IN ('payment_pending', 'confirmed');

-- failure_checks: how many times the payment reconciliation asked the
-- provider about a failed booking's payment, which can still succeed (an
-- asynchronous authentication): a few times, further apart each time.
-- amount_refunded: money of a payment returned at the provider while the
-- sale stands (a partial refund), in the currency's smallest unit.
-- refund_error, refund_retry_at: a refund the provider refused as an
-- invalid request is not made again at once: the reason is kept for an
-- operator, and the next attempt waits until refund_retry_at.
ALTER TABLE bookings
    ADD COLUMN failure_checks  SMALLINT NOT NULL DEFAULT 0 CHECK (failure_checks >= 0),
    ADD COLUMN amount_refunded BIGINT NOT NULL DEFAULT 0 CHECK (amount_refunded >= 0),
    ADD COLUMN refund_error    TEXT NOT NULL DEFAULT '',
    ADD COLUMN refund_retry_at TIMESTAMPTZ;

DROP INDEX bookings_unsettled;
CREATE INDEX bookings_unsettled ON bookings (checked_at)
    WHERE status = 'payment_pending' OR refund_status IN ('pending', 'failed')
        OR (status = 'failed' AND failure_checks < 5 AND payment_id IS NOT NULL);
