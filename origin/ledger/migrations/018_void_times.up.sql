-- When each ticket was voided, so that an offline scan uploaded after the
-- voiding can be told from one made after it. Tickets voided before this
-- migration keep no time (NULL): their scans are judged as before. A
-- voiding made through the ledger stamps the origin's clock; one made by
-- another statement takes the database's.
ALTER TABLE ticket_voids ADD COLUMN voided_at TIMESTAMPTZ;
ALTER TABLE ticket_voids ALTER COLUMN voided_at SET DEFAULT now();

-- A device offline let the holder in before the ticket was voided: the
-- scan is recorded ticket_void (the booking was cancelled or refunded, so
-- it has no admitted ticket), and marked so the operator can chase it.
ALTER TABLE scans ADD COLUMN admitted_before_void BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE scans ADD CONSTRAINT scans_admitted_before_void
    CHECK (NOT admitted_before_void OR (result = 'ticket_void' AND offline));
