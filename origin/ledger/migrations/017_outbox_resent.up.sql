-- An event an operator sends again starts its tries afresh: its age for
-- ORIGIN_EVENTS_MAX_AGE counts from when it was sent again, not from its
-- change, or one older than the limit (after a long outage of the site,
-- when events are sent again) would be given up on again at its first
-- failure.
ALTER TABLE outbox ADD COLUMN resent_at TIMESTAMPTZ;
