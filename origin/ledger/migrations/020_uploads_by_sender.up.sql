-- An offline scan sent again is its sender's: the device that made it, or
-- the shared gate token (no device).

-- Two devices at one gate can scan one code in the same moment: the
-- second let its holder in as well, a double admission, not the first's
-- upload sent again. Only a scan its sender recorded before is a replay.
DROP INDEX scans_uploaded_once;
CREATE UNIQUE INDEX scans_uploaded_once ON scans (code, gate, gate_event_id, scanned_at, (coalesce(device_id::text, '')))
    WHERE offline;

-- The offline scans refused with no scan row (an expired or forged code,
-- one never issued, a time before its ticket's issue), noted so that one
-- sent again is counted once, as a recorded scan is. A refused code may be
-- anything its sender sent, of any length: its SHA-256 is enough to know
-- it again.
CREATE TABLE offline_refusals (
    code_sha256   BYTEA NOT NULL CHECK (length(code_sha256) = 32),
    gate          TEXT NOT NULL CHECK (gate <> ''),
    gate_event_id BIGINT NOT NULL REFERENCES events (id),
    scanned_at    TIMESTAMPTZ NOT NULL,
    device_id     UUID REFERENCES gate_devices (id),
    -- What the scan was counted as.
    result        TEXT NOT NULL CHECK (result <> ''),
    recorded_at   TIMESTAMPTZ NOT NULL
);

CREATE UNIQUE INDEX offline_refusals_once
    ON offline_refusals (code_sha256, gate, gate_event_id, scanned_at, (coalesce(device_id::text, '')));
