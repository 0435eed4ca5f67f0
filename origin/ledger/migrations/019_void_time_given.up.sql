-- A voiding through the ledger was stamped with the origin's clock by an
-- UPDATE of the rows the trigger had just inserted: every void row written
-- twice. The ledger now hands its clock to the trigger in the transaction's
-- setting waitroom.voided_at (set_config, local to the transaction), so the
-- row is written once. Without the setting (another statement, an operator's
-- UPDATE) the database's clock stamps it, as before.
CREATE OR REPLACE FUNCTION tickets_void_feed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ticket_voids (event_id, code, voided_at)
    VALUES (NEW.event_id, NEW.code,
        coalesce(nullif(current_setting('waitroom.voided_at', true), '')::timestamptz, now()))
    ON CONFLICT (code) DO NOTHING;
    RETURN NULL;
END $$;
