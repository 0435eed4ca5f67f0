-- A scan names its ticket's booking. The code a gate verified carries the
-- booking's id, so the scan's lock (scans.go) and the outbox's
-- ticket.admitted find the booking by its key, and the bookings need no
-- index of their codes: one index fewer for every confirmation to write.

ALTER TABLE scans ADD COLUMN booking_id UUID REFERENCES bookings (id);
UPDATE scans s SET booking_id = b.id FROM bookings b WHERE b.ticket_codes @> ARRAY[s.code];
ALTER TABLE scans ALTER COLUMN booking_id SET NOT NULL;

DROP INDEX bookings_ticket_codes;

CREATE OR REPLACE FUNCTION scans_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    b bookings%ROWTYPE;
    t RECORD;
BEGIN
    SELECT * INTO b FROM bookings WHERE id = NEW.booking_id;
    SELECT * INTO t FROM unnest(b.ticket_codes, b.ticket_seats, b.ticket_seat_ids) AS u (code, seat, seat_id)
        WHERE u.code = NEW.code;
    PERFORM outbox_add(b.id, 'ticket.admitted', NEW.recorded_at, jsonb_build_object(
        'booking', b.id, 'event', NEW.event_id, 'user', b.user_id,
        'ticket', jsonb_build_object('code', t.code, 'seat', t.seat, 'seat_id', t.seat_id),
        'gate', NEW.gate, 'scanned_at', NEW.scanned_at, 'offline', NEW.offline));
    RETURN NULL;
END $$;
