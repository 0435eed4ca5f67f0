-- The queue position of the token a hold was made with, for the audit
-- trail: the origin keeps no other record of a buyer's admission. NULL for
-- holds made before it was recorded, or with no position. Nullable without
-- a default, so adding it rewrites no row.
ALTER TABLE holds ADD COLUMN position BIGINT CHECK (position > 0);
