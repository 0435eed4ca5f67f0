-- A paid booking keeps its hold for good, without rewriting the hold's row.
-- Until now a confirmation wrote both rows (the hold to 'confirmed', the
-- booking to 'confirmed'), one row more for every seat sold. The booking's
-- confirmation is the sale; its hold stays 'pending' and is sold from then
-- on, as 016 made a booking's payment keep its hold without a write.
--
-- A hold is sold when its status is 'confirmed' (rows written before this
-- migration, and a hold confirmed without a booking) or when it is pending
-- and one of its bookings was confirmed from it: confirmed_at is set by the
-- confirmation and never cleared, so a sale's hold stays sold until it is
-- released, as a confirmed hold stayed confirmed. A booking confirmed from
-- the overflow reserve does not count: its hold expired first.
--
-- The sales have an index of their own, by event first: a hold's is found
-- by its event and id, and a rebuild reads an event's in one pass.
CREATE INDEX bookings_sales ON bookings (event_id, hold_id) WHERE confirmed_at IS NOT NULL AND NOT overflow;

CREATE FUNCTION hold_sold(event BIGINT, hold UUID) RETURNS BOOLEAN LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM bookings b
        WHERE b.event_id = event AND b.hold_id = hold AND b.confirmed_at IS NOT NULL AND NOT b.overflow)
$$;

-- What keeps a pending hold past its own expiry: a payment under way
-- (016), or its sale. Every reading of whether a hold is live goes through
-- this, so none of them counts a sold hold as lapsed, and no reaper or new
-- hold of its buyer ends it.
CREATE OR REPLACE FUNCTION booking_keeps(event BIGINT, hold UUID, t TIMESTAMPTZ) RETURNS BOOLEAN LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM bookings b WHERE b.event_id = event AND b.hold_id = hold AND b.hold_until >= t)
        OR hold_sold(event, hold)
$$;

-- Reserved seats are sold with their booking now (005's trigger sold them
-- when the hold's row was confirmed, which a sale no longer does).
CREATE FUNCTION bookings_seats_sold() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE event_seats SET status = 'sold', hold_expires_at = NULL
    WHERE event_id = NEW.event_id AND hold_id = NEW.hold_id;
    RETURN NULL;
END $$;

CREATE TRIGGER bookings_seats_sold AFTER UPDATE OF confirmed_at ON bookings
    FOR EACH ROW
    WHEN (OLD.confirmed_at IS NULL AND NEW.confirmed_at IS NOT NULL AND NOT NEW.overflow)
    EXECUTE FUNCTION bookings_seats_sold();

-- A sold hold's places in a section: 013's trigger took a hold's numbers
-- away at any change of a hold not confirmed, which a sold hold now is.
-- They go when the hold ends, as the buckets get its places back.
CREATE OR REPLACE FUNCTION holds_ga_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM new_rows WHERE ga_section IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM ga_inventory g
        WHERE (g.event_id, g.section, g.bucket) IN (
            SELECT n.event_id, n.ga_section, b
            FROM new_rows n JOIN old_rows o ON o.id = n.id, unnest(n.ga_buckets) AS b
            WHERE n.ga_section IS NOT NULL AND o.status IN ('pending', 'confirmed') AND n.status IN ('expired', 'released'))
        ORDER BY g.event_id, g.section, g.bucket
        FOR UPDATE;
    UPDATE ga_inventory g SET remaining = g.remaining + e.q
        FROM (SELECT n.event_id, n.ga_section AS section, b AS bucket, count(*)::int AS q
            FROM new_rows n JOIN old_rows o ON o.id = n.id, unnest(n.ga_buckets) AS b
            WHERE n.ga_section IS NOT NULL AND o.status IN ('pending', 'confirmed') AND n.status IN ('expired', 'released')
            GROUP BY 1, 2, 3) e
        WHERE g.event_id = e.event_id AND g.section = e.section AND g.bucket = e.bucket;
    UPDATE ga_places p SET hold_id = NULL
        FROM new_rows n
        WHERE p.hold_id = n.id AND n.ga_section IS NOT NULL AND n.status <> 'confirmed'
            AND NOT (n.status = 'pending' AND hold_sold(n.event_id, n.id));
    RETURN NULL;
END $$;
