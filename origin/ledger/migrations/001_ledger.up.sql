-- The ledger: the source of truth for every seat. Redis is rebuilt from it.

CREATE TABLE events (
    id               BIGINT PRIMARY KEY CHECK (id > 0),
    name             TEXT NOT NULL CHECK (name <> ''),
    capacity         INTEGER NOT NULL CHECK (capacity > 0),
    overflow_pct     INTEGER NOT NULL CHECK (overflow_pct BETWEEN 0 AND 100),
    -- Seats kept out of the sellable pool to absorb payments that land after
    -- their hold expired; sellable + overflow_reserve = capacity.
    overflow_reserve INTEGER NOT NULL CHECK (overflow_reserve >= 0),
    sellable         INTEGER NOT NULL CHECK (sellable > 0),
    price            BIGINT NOT NULL CHECK (price >= 0),
    currency         TEXT NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    hold_ttl_seconds INTEGER NOT NULL CHECK (hold_ttl_seconds > 0),
    max_per_user     INTEGER NOT NULL CHECK (max_per_user > 0),
    created_at       TIMESTAMPTZ NOT NULL,
    CHECK (sellable + overflow_reserve = capacity)
);

-- Ids for events created without one; explicit ids skip the ones taken.
CREATE SEQUENCE events_id_seq OWNED BY events.id;

CREATE TABLE holds (
    id              UUID PRIMARY KEY,
    -- No foreign key to events on purpose: every insert would take a KEY
    -- SHARE lock on the one hot event row, which turns into multixact churn
    -- with thousands of holds a second. Events are never deleted, and a hold
    -- is only made for an event read from this table.
    event_id        BIGINT NOT NULL,
    user_id         TEXT NOT NULL,
    quantity        INTEGER NOT NULL CHECK (quantity > 0),
    amount          BIGINT NOT NULL CHECK (amount >= 0),
    status          TEXT NOT NULL CHECK (status IN ('pending', 'confirmed', 'expired', 'released')),
    expires_at      TIMESTAMPTZ NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL,
    updated_at      TIMESTAMPTZ NOT NULL,
    -- The request that made the hold and the exact 201 it got, written with
    -- the hold in the same INSERT: a retry with the same Idempotency-Key is
    -- answered byte for byte even after Redis lost its idempotency records.
    idempotency_key TEXT NOT NULL,
    request_digest  TEXT NOT NULL,
    response        BYTEA NOT NULL
);

-- One live hold per user per event, enforced here too: a flushed or wrongly
-- rebuilt Redis cannot hand a user a second hold. "Live" in the index is
-- pending or confirmed; a pending hold past expires_at is replaced by marking
-- it expired in the same transaction as the new insert.
CREATE UNIQUE INDEX holds_one_live_per_user ON holds (event_id, user_id)
    WHERE status IN ('pending', 'confirmed');

CREATE UNIQUE INDEX holds_idempotency_key ON holds (event_id, user_id, idempotency_key);

-- The reaper's index: only pending holds, so it stays small however long the
-- history.
CREATE INDEX holds_reaper ON holds (expires_at) WHERE status = 'pending';
