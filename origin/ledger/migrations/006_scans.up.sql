-- Every scan of a ticket at a gate the origin was told of: scanned at the
-- gate while the origin answered (online), or uploaded later by a device
-- that verified the code itself (offline). A ticket admits once: the scan
-- marked first is the earliest scan that admitted it, by the time it was
-- scanned, and the unique index keeps one first per ticket whatever the
-- order the scans arrive in.
CREATE TABLE scans (
    id          BIGSERIAL PRIMARY KEY,
    code        TEXT NOT NULL REFERENCES tickets (code),
    event_id    BIGINT NOT NULL,
    gate        TEXT NOT NULL CHECK (gate <> ''),
    -- By the origin's clock for an online scan, the device's for an upload.
    scanned_at  TIMESTAMPTZ NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL,
    offline     BOOLEAN NOT NULL,
    -- What the gate was told: the ticket admitted, or refused as used or void.
    result      TEXT NOT NULL CHECK (result IN ('admitted', 'already_used', 'ticket_void')),
    -- The ticket's first admission. A scan admitted first can lose the
    -- mark to an earlier offline scan uploaded after it: it stays
    -- 'admitted' (the gate let the holder in) and is no longer first,
    -- which is how the ledger shows a second person let in.
    first       BOOLEAN NOT NULL,
    CHECK (NOT first OR result = 'admitted')
);

CREATE UNIQUE INDEX scans_first ON scans (code) WHERE first;
-- A device uploading its scans again (its answer was lost) records each
-- once. Online scans are not deduplicated: the same code shown twice at one
-- gate is two people.
CREATE UNIQUE INDEX scans_uploaded_once ON scans (code, gate, scanned_at) WHERE offline;
CREATE INDEX scans_event ON scans (event_id);
