-- Reserved seating: an event may carry a seat map, and then has one row per
-- seat here. The seat row is where a seat is claimed: a hold takes its
-- seats with one conditional update whose row count must equal the seats
-- asked for, or the hold is not written.

-- The seat map as created (sections with their price, rows, seats); NULL
-- for a general-admission event.
ALTER TABLE events ADD COLUMN seating JSONB;

-- The reserved seats a hold has (sorted); NULL for general admission.
-- Nullable without a default, so adding it rewrites no row.
ALTER TABLE holds ADD COLUMN seats TEXT[];

CREATE TABLE event_seats (
    event_id        BIGINT NOT NULL,
    seat_id         TEXT NOT NULL,
    section         TEXT NOT NULL,
    -- The seat's number in the whole map (1..capacity): the seat number
    -- its ticket carries, so the tickets_one_per_seat index also keeps one
    -- valid ticket per reserved seat.
    n               INTEGER NOT NULL CHECK (n > 0),
    status          TEXT NOT NULL DEFAULT 'free' CHECK (status IN ('free', 'held', 'sold')),
    hold_id         UUID,
    -- A held seat whose hold is past this is free (lazy expiry), before
    -- the reaper marks the hold.
    hold_expires_at TIMESTAMPTZ,
    PRIMARY KEY (event_id, seat_id),
    UNIQUE (event_id, n),
    CHECK ((status = 'free') = (hold_id IS NULL))
);

CREATE INDEX event_seats_hold ON event_seats (hold_id) WHERE hold_id IS NOT NULL;

-- The seats follow their hold: sold when it is confirmed, free when it
-- expires or is released, their expiry moved with it. One trigger, so no
-- change of a hold's status, wherever it is made, leaves its seats behind.
-- Only seats still the hold's are touched: a seat a later hold took after
-- this one lapsed stays that hold's.
CREATE FUNCTION holds_seats_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'confirmed' THEN
        UPDATE event_seats SET status = 'sold', hold_expires_at = NULL
        WHERE event_id = NEW.event_id AND hold_id = NEW.id;
    ELSIF NEW.status IN ('expired', 'released') THEN
        UPDATE event_seats SET status = 'free', hold_id = NULL, hold_expires_at = NULL
        WHERE event_id = NEW.event_id AND hold_id = NEW.id;
    ELSE
        UPDATE event_seats SET hold_expires_at = NEW.expires_at
        WHERE event_id = NEW.event_id AND hold_id = NEW.id AND status = 'held';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER holds_seats_follow AFTER UPDATE OF status, expires_at ON holds
    FOR EACH ROW
    WHEN (NEW.seats IS NOT NULL
        AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.expires_at IS DISTINCT FROM NEW.expires_at))
    EXECUTE FUNCTION holds_seats_follow();

-- The reserved seat of a ticket; NULL for general admission.
ALTER TABLE tickets ADD COLUMN seat_id TEXT;
