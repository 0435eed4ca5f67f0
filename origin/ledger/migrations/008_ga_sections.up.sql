-- General-admission sections inside a seat map: places sold by quantity,
-- none named. A section's places left are split over a few bucket rows, so
-- its holds do not all wait on one hot row: a hold takes its places from a
-- bucket no other hold has locked, with a conditional decrement the CHECK
-- backs (a section can never go below none left).
CREATE TABLE ga_inventory (
    event_id  BIGINT NOT NULL,
    section   TEXT NOT NULL,
    bucket    INTEGER NOT NULL,
    remaining INTEGER NOT NULL CHECK (remaining >= 0),
    PRIMARY KEY (event_id, section, bucket)
);

-- The section a hold has places of, and the bucket each place came from
-- (one entry per place), so that they go back where they were taken; NULL
-- for every other hold. Nullable without a default, so adding them
-- rewrites no row.
ALTER TABLE holds ADD COLUMN ga_section TEXT;
ALTER TABLE holds ADD COLUMN ga_buckets INTEGER[];

-- The numbers of a section's places (within the map's numbering, so the
-- tickets_one_per_seat index keeps them apart from the reserved seats'
-- and each other's): a place is given to a confirmed hold for its ticket,
-- and back when the hold ends.
CREATE TABLE ga_places (
    event_id BIGINT NOT NULL,
    -- The place's number in the whole map, and in its section (1..capacity).
    n        INTEGER NOT NULL CHECK (n > 0),
    section  TEXT NOT NULL,
    place    INTEGER NOT NULL CHECK (place > 0),
    hold_id  UUID,
    PRIMARY KEY (event_id, n)
);
CREATE INDEX ga_places_free ON ga_places (event_id, section, n) WHERE hold_id IS NULL;
CREATE INDEX ga_places_hold ON ga_places (hold_id) WHERE hold_id IS NOT NULL;

-- A hold of a section that ends (expired, released) gives its places back
-- to their buckets, and its place numbers. Per statement, not per row: the
-- reaper ends many holds in one statement, and rows locked in the order of
-- its rows would deadlock with another reaper's; here the buckets are
-- locked in one order (event, section, bucket), as every statement that
-- waits for buckets locks them, so none deadlocks with another.
CREATE FUNCTION holds_ga_follow() RETURNS trigger LANGUAGE plpgsql AS $$
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
        FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE p.hold_id = n.id AND n.ga_section IS NOT NULL
            AND o.status IN ('pending', 'confirmed') AND n.status IN ('expired', 'released');
    RETURN NULL;
END $$;

CREATE TRIGGER holds_ga_follow AFTER UPDATE ON holds
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION holds_ga_follow();
