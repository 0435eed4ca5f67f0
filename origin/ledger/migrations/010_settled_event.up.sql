-- The webhook event that confirmed a booking is kept on the booking's row,
-- written by the confirmation's own update, rather than as a row of
-- payment_events written after it: the event is recorded in the
-- transaction that acted on it, and a sale writes one row fewer. The
-- unique index keeps it acted on once, as payment_events' key does; every
-- other event acted on is still a row of payment_events.
ALTER TABLE bookings ADD COLUMN settled_event TEXT;
CREATE UNIQUE INDEX bookings_settled_event ON bookings (provider, settled_event);
