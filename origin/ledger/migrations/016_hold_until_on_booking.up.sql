-- A booking keeps its hold for the payment without rewriting the hold's
-- row: until now the booking's transaction moved holds.expires_at, one
-- more row for every seat sold. The booking now carries the time it keeps
-- the hold until (hold_until, set when it is inserted, never changed), and
-- a hold's expiry is its own or the latest of its bookings', whichever is
-- later: expiry(holds). A failed booking's extension stands, as it did on
-- the hold's row: the buyer may pay again until it passes.
--
-- Every reading of a hold's expiry goes through expiry() or booking_keeps(), or,
-- for all of an event's holds at once, joins the event's extensions. What
-- ends a hold for its expiry first locks the row, then checks it in a later
-- statement: a booking inserted by a transaction that held the lock meanwhile
-- changed no row of holds, so only a fresh snapshot sees it.
ALTER TABLE bookings ADD COLUMN hold_until TIMESTAMPTZ;

-- By event first: a rebuild reads the extensions of an event's holds in
-- one pass; a hold's own, by its event and id.
CREATE INDEX bookings_hold_until ON bookings (event_id, hold_id, hold_until) WHERE hold_until IS NOT NULL;

CREATE FUNCTION expiry(h holds) RETURNS TIMESTAMPTZ LANGUAGE sql STABLE AS $$
    SELECT greatest(h.expires_at,
        (SELECT max(b.hold_until) FROM bookings b
            WHERE b.event_id = h.event_id AND b.hold_id = h.id AND b.hold_until IS NOT NULL))
$$;

-- Whether a booking keeps hold (of event) at or after t. A hold's expiry
-- is at or after t when expires_at >= t OR booking_keeps(event_id, id, t):
-- written so, the bookings are read only for a hold whose own expiry is
-- before t, and a scan of many holds reads only the columns it names (a
-- function of the whole row would have every row taken apart).
CREATE FUNCTION booking_keeps(event BIGINT, hold UUID, t TIMESTAMPTZ) RETURNS BOOLEAN LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM bookings b WHERE b.event_id = event AND b.hold_id = hold AND b.hold_until >= t)
$$;

-- Reserved seats follow their hold's expiry (005's trigger does so for a
-- change of the hold's row): a booking's extension moves them too, so no
-- other hold claims them during the payment.
CREATE FUNCTION bookings_seats_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE event_seats SET hold_expires_at = greatest(hold_expires_at, NEW.hold_until)
    WHERE event_id = NEW.event_id AND hold_id = NEW.hold_id AND status = 'held';
    RETURN NULL;
END $$;

CREATE TRIGGER bookings_seats_follow AFTER INSERT ON bookings
    FOR EACH ROW
    WHEN (NEW.hold_until IS NOT NULL)
    EXECUTE FUNCTION bookings_seats_follow();
