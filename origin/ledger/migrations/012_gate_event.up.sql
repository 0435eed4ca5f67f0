-- The gate knows its event: a device is registered for one event, and a
-- scan is judged for the event its gate serves.

-- A device's event. The devices registered before had none: they are
-- revoked here, since nothing says which event's tickets they may let in,
-- and are registered again, each for its event. A revoked device keeps a
-- NULL event; every other has one.
ALTER TABLE gate_devices ADD COLUMN event_id BIGINT REFERENCES events (id);
UPDATE gate_devices SET revoked_at = now() WHERE event_id IS NULL AND revoked_at IS NULL;
ALTER TABLE gate_devices ADD CONSTRAINT gate_devices_event CHECK (event_id IS NOT NULL OR revoked_at IS NOT NULL);

-- The event the gate scanned for. event_id stays the ticket's: the two
-- differ only for a ticket refused as another event's, which is never
-- admitted whatever statement writes the row.
ALTER TABLE scans ADD COLUMN gate_event_id BIGINT REFERENCES events (id);
UPDATE scans SET gate_event_id = event_id;
ALTER TABLE scans ALTER COLUMN gate_event_id SET NOT NULL;
ALTER TABLE scans DROP CONSTRAINT scans_result_check;
ALTER TABLE scans ADD CONSTRAINT scans_result_check
    CHECK (result IN ('admitted', 'already_used', 'ticket_void', 'wrong_event'));
ALTER TABLE scans ADD CONSTRAINT scans_own_event CHECK ((result = 'wrong_event') = (gate_event_id <> event_id));
CREATE INDEX scans_gate_event ON scans (gate_event_id);

-- A gate's name is its event's: north-3 of one event is not north-3 of
-- another, so an upload is recorded once per gate of an event.
DROP INDEX scans_uploaded_once;
CREATE UNIQUE INDEX scans_uploaded_once ON scans (code, gate, gate_event_id, scanned_at) WHERE offline;
