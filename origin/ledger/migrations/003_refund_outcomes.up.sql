-- Refunds followed to the provider's word.

-- refund_status gains failed: the provider reported the refund failed (at
-- once, or after it had succeeded), the money is the merchant's again, and
-- the payment reconciliation makes a new refund. refund_attempts counts the
-- refunds given up on: attempt n is made under its own idempotency key, and
-- every change of a refund names the attempt it is about, so a late answer
-- about an earlier attempt changes nothing.
ALTER TABLE bookings
    DROP CONSTRAINT bookings_refund_status_check,
    ADD CONSTRAINT bookings_refund_status_check CHECK (refund_status IN ('', 'pending', 'succeeded', 'failed')),
    ADD COLUMN refund_attempts INTEGER NOT NULL DEFAULT 0 CHECK (refund_attempts >= 0);

-- The payment reconciliation also takes the failed refunds.
DROP INDEX bookings_unsettled;
CREATE INDEX bookings_unsettled ON bookings (checked_at)
    WHERE status = 'payment_pending' OR refund_status IN ('pending', 'failed');
