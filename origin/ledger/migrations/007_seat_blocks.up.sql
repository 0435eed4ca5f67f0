-- Seat numbers without a hot row. Until now every confirmation of an event
-- took its numbers from events.next_seat, so it held the event's row lock
-- from then until its commit, and the confirmations of one event ran one
-- at a time. The numbers 1..capacity are now split into blocks, one row
-- each: a confirmation takes its numbers from a block no other confirmation
-- has locked (SKIP LOCKED), so as many confirmations commit at once as there
-- are blocks. A block's next only moves inside the confirmation's
-- transaction, so a confirmation that rolls back hands its numbers back:
-- numbering has no gaps, numbers stay unique (the blocks do not overlap,
-- and tickets_one_per_seat still guards) and within the capacity. They are
-- no longer handed out in the order of the confirmations.
CREATE TABLE seat_blocks (
    event_id BIGINT NOT NULL,
    block    INTEGER NOT NULL,
    -- The block's next number never handed out, and its end (excluded).
    next     INTEGER NOT NULL,
    stop     INTEGER NOT NULL,
    PRIMARY KEY (event_id, block),
    CHECK (next <= stop)
);

-- An event's blocks: up to 64 (a block of at least 8 numbers), over the
-- numbers from first to its capacity. 64 is twice the origin's default
-- connection pool: a confirmation nearly always finds a block free.
CREATE FUNCTION seat_blocks_of(event BIGINT, first INTEGER, capacity INTEGER)
RETURNS TABLE (event_id BIGINT, block INTEGER, next INTEGER, stop INTEGER)
LANGUAGE sql IMMUTABLE AS $$
    WITH n AS (SELECT (capacity - first + 1)::bigint AS span, greatest(least(64, (capacity - first + 1) / 8), 1) AS blocks)
    SELECT event, b, (first + n.span * b / n.blocks)::int, (first + n.span * (b + 1) / n.blocks)::int
    FROM n, generate_series(0, n.blocks - 1) AS b
$$;

-- Every new event gets its blocks in the transaction that creates it,
-- whichever statement inserts it.
CREATE FUNCTION seat_blocks_for_new_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO seat_blocks SELECT * FROM seat_blocks_of(NEW.id, 1, NEW.capacity);
    RETURN NULL;
END
$$;
CREATE TRIGGER events_seat_blocks AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION seat_blocks_for_new_event();

-- Events created before: the numbers not handed out yet.
INSERT INTO seat_blocks
    SELECT b.* FROM events e, seat_blocks_of(e.id, e.next_seat, e.capacity) b WHERE e.next_seat <= e.capacity;

ALTER TABLE events DROP COLUMN next_seat;
