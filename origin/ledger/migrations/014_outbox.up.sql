-- Booking events for the site (docs/api.md, booking events out): a
-- transactional outbox. A row is written by a trigger in the transaction of
-- the change it reports, whatever statement makes it, so a change commits
-- with its event or not at all; the origin's deliverer sends the rows and
-- deletes each once the site acknowledged it.
--
-- Rows are written only on connections that set waitroom.outbox = 'on'
-- (the origin does when ORIGIN_EVENTS_URL is set): a sale that sends no
-- events pays no outbox row for a seat sold.

CREATE TABLE outbox (
    -- The order of the changes: a booking's events are sent in it.
    id         BIGSERIAL PRIMARY KEY,
    -- evt_…: the id the site dedups on.
    event_id   TEXT NOT NULL UNIQUE,
    -- Events of one booking (its tickets' included) go out one at a time.
    booking_id UUID NOT NULL,
    type       TEXT NOT NULL,
    -- The JSON body, byte for byte what is signed and sent on every try.
    body       TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    -- pending (to send, or being sent) or dead (given up on; sent again
    -- only when an operator asks).
    status     TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'dead')),
    attempts   INTEGER NOT NULL DEFAULT 0,
    -- When the row may be taken next: its next try, or the end of the
    -- lease of the node sending it, so nodes share the work.
    next_at    TIMESTAMPTZ NOT NULL,
    last_error TEXT NOT NULL DEFAULT '',
    dead_at    TIMESTAMPTZ
);

CREATE INDEX outbox_due ON outbox (next_at) WHERE status = 'pending';
CREATE INDEX outbox_booking ON outbox (booking_id, id) WHERE status = 'pending';
CREATE INDEX outbox_dead ON outbox (dead_at, id) WHERE status = 'dead';

CREATE FUNCTION outbox_add(p_booking UUID, p_type TEXT, p_created TIMESTAMPTZ, p_data JSONB) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    evt TEXT := 'evt_' || replace(gen_random_uuid()::text, '-', '');
BEGIN
    INSERT INTO outbox (event_id, booking_id, type, body, created_at, next_at)
    VALUES (evt, p_booking, p_type,
        jsonb_build_object('id', evt, 'type', p_type,
            'created', floor(extract(epoch FROM p_created))::bigint, 'data', p_data)::text,
        p_created, p_created);
END $$;

-- The valid tickets of a booking, as the events show them.
CREATE FUNCTION outbox_tickets(p_booking UUID) RETURNS JSONB LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object('code', t.code, 'seat', t.seat, 'seat_id', t.seat_id)
        ORDER BY t.seat), '[]'::jsonb)
    FROM tickets t WHERE t.booking_id = p_booking AND t.valid
$$;

-- booking.confirmed, booking.cancelled, booking.refunded. Deferred to the
-- commit, so a confirmation's event carries the tickets its transaction
-- issued after the status changed.
CREATE FUNCTION bookings_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM outbox_add(NEW.id, 'booking.' || NEW.status, NEW.updated_at, jsonb_build_object(
        'booking', NEW.id, 'event', NEW.event_id, 'user', NEW.user_id, 'status', NEW.status,
        'reason', NEW.status_reason, 'quantity', NEW.quantity, 'amount', NEW.amount,
        'currency', NEW.currency, 'tickets', outbox_tickets(NEW.id)));
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER bookings_outbox AFTER UPDATE OF status ON bookings
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status IN ('confirmed', 'cancelled', 'refunded')
        AND current_setting('waitroom.outbox', true) = 'on')
    EXECUTE FUNCTION bookings_outbox();

-- ticket.voided, timed by its booking's change.
CREATE FUNCTION tickets_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    b bookings%ROWTYPE;
BEGIN
    SELECT * INTO b FROM bookings WHERE id = NEW.booking_id;
    PERFORM outbox_add(NEW.booking_id, 'ticket.voided', b.updated_at, jsonb_build_object(
        'booking', NEW.booking_id, 'event', NEW.event_id, 'user', b.user_id,
        'ticket', jsonb_build_object('code', NEW.code, 'seat', NEW.seat, 'seat_id', NEW.seat_id)));
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER tickets_outbox AFTER UPDATE OF valid ON tickets
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.valid AND NOT NEW.valid AND current_setting('waitroom.outbox', true) = 'on')
    EXECUTE FUNCTION tickets_outbox();

-- ticket.admitted: every scan that let its holder in.
CREATE FUNCTION scans_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t tickets%ROWTYPE;
    u TEXT;
BEGIN
    SELECT * INTO t FROM tickets WHERE code = NEW.code;
    SELECT user_id INTO u FROM bookings WHERE id = t.booking_id;
    PERFORM outbox_add(t.booking_id, 'ticket.admitted', NEW.recorded_at, jsonb_build_object(
        'booking', t.booking_id, 'event', NEW.event_id, 'user', u,
        'ticket', jsonb_build_object('code', t.code, 'seat', t.seat, 'seat_id', t.seat_id),
        'gate', NEW.gate, 'scanned_at', NEW.scanned_at, 'offline', NEW.offline));
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER scans_outbox AFTER INSERT ON scans
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.result = 'admitted' AND current_setting('waitroom.outbox', true) = 'on')
    EXECUTE FUNCTION scans_outbox();
