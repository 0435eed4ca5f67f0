-- The gate's devices and what they sync.

-- A gate device the operator registered: its token is "gd.<id>.<secret>",
-- and only SHA-256 of the secret is kept, so the table cannot be used to
-- scan. A revoked device stays (its scans name it) and no longer scans.
CREATE TABLE gate_devices (
    id          UUID PRIMARY KEY,
    gate        TEXT NOT NULL CHECK (gate <> ''),
    name        TEXT NOT NULL DEFAULT '',
    secret_hash BYTEA NOT NULL CHECK (length(secret_hash) = 32),
    created_at  TIMESTAMPTZ NOT NULL,
    revoked_at  TIMESTAMPTZ
);

-- The device a scan came from; NULL for the shared gate token.
ALTER TABLE scans ADD COLUMN device_id UUID REFERENCES gate_devices (id);
CREATE INDEX scans_device ON scans (device_id, recorded_at) WHERE device_id IS NOT NULL;

-- Every ticket voided, in the order the voidings committed, for the
-- devices that verify codes offline. xid is the voiding transaction's: a
-- reader takes only rows of transactions older than every one still
-- running (pg_snapshot_xmin), so a voiding that commits after a read can
-- never land behind the cursor that read handed out.
CREATE TABLE ticket_voids (
    id       BIGSERIAL PRIMARY KEY,
    event_id BIGINT NOT NULL,
    code     TEXT NOT NULL UNIQUE REFERENCES tickets (code),
    xid      xid8 NOT NULL DEFAULT pg_current_xact_id()
);

CREATE INDEX ticket_voids_feed ON ticket_voids (event_id, xid, id);

-- A ticket is voided wherever it is (a cancellation, a refund at the
-- provider): the trigger keeps the feed whatever statement does it.
CREATE FUNCTION tickets_void_feed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ticket_voids (event_id, code) VALUES (NEW.event_id, NEW.code) ON CONFLICT (code) DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER tickets_void_feed AFTER UPDATE OF valid ON tickets
    FOR EACH ROW WHEN (OLD.valid AND NOT NEW.valid)
    EXECUTE FUNCTION tickets_void_feed();

CREATE TRIGGER tickets_void_feed_insert AFTER INSERT ON tickets
    FOR EACH ROW WHEN (NOT NEW.valid)
    EXECUTE FUNCTION tickets_void_feed();

-- The tickets voided before the feed existed.
INSERT INTO ticket_voids (event_id, code)
    SELECT event_id, code FROM tickets WHERE NOT valid ORDER BY event_id, issued_at, code;
