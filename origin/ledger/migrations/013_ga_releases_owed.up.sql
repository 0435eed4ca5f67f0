-- General-admission sections: what Redis is owed, and place numbers that
-- follow their hold.

-- A hold of a section the ledger ended on its own, with no caller left to
-- give its places back in Redis: the lapsed holds a new hold of the
-- section expires when the buckets fall short (the fallback). Such a hold
-- may be confirmed in Redis, its confirmation's ledger step having failed:
-- Redis never reclaims a confirmed hold, so without this note its places
-- would stay taken there while the ledger has them free. The note is
-- written in the transaction that ends the hold; the origin releases the
-- hold in Redis (a release by hold id, which gives places back once however
-- often it runs) and then deletes the note.
CREATE TABLE releases_owed (
    hold_id  UUID PRIMARY KEY,
    event_id BIGINT NOT NULL,
    noted_at TIMESTAMPTZ NOT NULL
);

-- As in 008, and a hold that is not confirmed has no place number: its
-- numbers go when it leaves confirmed, and any it was given while not
-- confirmed go with its next change, so a number is never held by a hold
-- whose places are back in the buckets.
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
        WHERE p.hold_id = n.id AND n.ga_section IS NOT NULL AND n.status <> 'confirmed';
    RETURN NULL;
END $$;

-- Numbers given before to a hold that is not confirmed, unless a valid
-- ticket carries the number (handed out again, it would be two people's).
UPDATE ga_places p SET hold_id = NULL
    WHERE p.hold_id IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.id = p.hold_id AND h.status = 'confirmed')
        AND NOT EXISTS (SELECT 1 FROM tickets t WHERE t.event_id = p.event_id AND t.seat = p.n AND t.valid);
