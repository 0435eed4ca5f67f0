-- Bookings, payments and tickets.

-- overflow_used: seats confirmed from the overflow reserve (late payments),
-- taken and given back by conditional updates, so the reserve is never
-- oversold. next_seat: the next ticket seat number never handed out; seats
-- of cancelled bookings go to free_seats and are handed out again first.
-- Neither can exceed the event's size: a ticket is never issued without a
-- seat.
ALTER TABLE events
    ADD COLUMN overflow_used INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN next_seat     INTEGER NOT NULL DEFAULT 1,
    ADD CONSTRAINT events_overflow_used CHECK (overflow_used BETWEEN 0 AND overflow_reserve),
    ADD CONSTRAINT events_next_seat CHECK (next_seat BETWEEN 1 AND capacity + 1);

CREATE TABLE bookings (
    id              UUID PRIMARY KEY,
    hold_id         UUID NOT NULL REFERENCES holds (id),
    event_id        BIGINT NOT NULL,
    user_id         TEXT NOT NULL,
    quantity        INTEGER NOT NULL CHECK (quantity > 0),
    amount          BIGINT NOT NULL CHECK (amount >= 0),
    currency        TEXT NOT NULL,
    status          TEXT NOT NULL
                    CHECK (status IN ('payment_pending', 'confirmed', 'failed', 'cancelled', 'refunded')),
    -- Why the booking is where it is (a decline code, late_payment_overflow,
    -- late_payment_sold_out, cancelled_by_buyer, …); '' when nothing needs
    -- saying.
    status_reason   TEXT NOT NULL DEFAULT '',
    provider        TEXT NOT NULL,
    payment_method  TEXT NOT NULL,
    -- Unknown until the provider answers (or its webhook names it).
    payment_id      TEXT,
    -- Confirmed from the overflow reserve: its hold had expired; its seats
    -- count in events.overflow_used, not in the holds.
    overflow        BOOLEAN NOT NULL DEFAULT false,
    -- '' (no refund due), pending (decided, not yet done at the provider),
    -- succeeded.
    refund_status   TEXT NOT NULL DEFAULT '' CHECK (refund_status IN ('', 'pending', 'succeeded')),
    refund_id       TEXT,
    -- The request that made the booking and the answer it got, so a retry
    -- with the same Idempotency-Key is answered byte for byte even after
    -- Redis lost its idempotency records. response is NULL until the
    -- provider call is over.
    idempotency_key TEXT NOT NULL,
    request_digest  TEXT NOT NULL,
    response        BYTEA,
    created_at      TIMESTAMPTZ NOT NULL,
    updated_at      TIMESTAMPTZ NOT NULL,
    confirmed_at    TIMESTAMPTZ,
    -- When the payment reconciliation last looked at the booking: a lease,
    -- so several origin nodes don't ask the provider about the same one.
    checked_at      TIMESTAMPTZ NOT NULL
);

-- One booking per hold. A failed payment leaves the hold to the buyer until
-- it expires; the retry is a new booking (its own payment key), so failed
-- bookings stay out of the constraint.
CREATE UNIQUE INDEX bookings_one_per_hold ON bookings (hold_id) WHERE status <> 'failed';
CREATE UNIQUE INDEX bookings_idempotency_key ON bookings (user_id, idempotency_key);
CREATE UNIQUE INDEX bookings_payment ON bookings (provider, payment_id);
-- The payment reconciliation's index: only unsettled bookings.
CREATE INDEX bookings_unsettled ON bookings (checked_at)
    WHERE status = 'payment_pending' OR refund_status = 'pending';

CREATE TABLE tickets (
    code       TEXT PRIMARY KEY,
    booking_id UUID NOT NULL REFERENCES bookings (id),
    event_id   BIGINT NOT NULL,
    seat       INTEGER NOT NULL CHECK (seat > 0),
    -- false once the booking is cancelled.
    valid      BOOLEAN NOT NULL DEFAULT true,
    issued_at  TIMESTAMPTZ NOT NULL
);

-- Nobody holds a ticket for a seat somebody else holds one for.
CREATE UNIQUE INDEX tickets_one_per_seat ON tickets (event_id, seat) WHERE valid;
CREATE INDEX tickets_booking ON tickets (booking_id);

-- Seats of cancelled bookings, handed out again before new numbers.
CREATE TABLE free_seats (
    event_id BIGINT NOT NULL,
    seat     INTEGER NOT NULL,
    PRIMARY KEY (event_id, seat)
);

-- Webhooks come at least once: an event id is acted on once.
CREATE TABLE payment_events (
    provider    TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    type        TEXT NOT NULL,
    payment_id  TEXT NOT NULL,
    booking_id  TEXT NOT NULL,
    received_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (provider, event_id)
);
