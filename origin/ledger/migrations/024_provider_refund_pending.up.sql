-- provider_refund_pending: a refund made at the provider (its dashboard) of
-- a confirmed booking's payment was pending when the origin last looked.
-- Its end is told by webhooks only; the payment reconciliation asks about
-- such a booking until none is pending, so a webhook lost for good does not
-- leave a sale standing on money returned.
ALTER TABLE bookings ADD COLUMN provider_refund_pending BOOLEAN NOT NULL DEFAULT false;

DROP INDEX bookings_unsettled;
CREATE INDEX bookings_unsettled ON bookings (checked_at)
    WHERE status = 'payment_pending' OR refund_status IN ('pending', 'failed')
        OR (status = 'failed' AND failure_checks < 5 AND payment_id IS NOT NULL)
        OR (status = 'confirmed' AND provider_refund_pending);
