-- coldwire catalog, version 13: rehydrations signed by the proxy.
--
-- coldwire.rehydrate_<id> brings cold rows back into the heap (and marks keys absent from
-- the cold tier) before a write, on the client's own connection and as the client's role.
-- It took the rows and keys from its caller and checked only INSERT privilege, so a role
-- that may only INSERT could, connected straight to Postgres, pass rows of its own making
-- and so replace or hide cold rows. Each call now carries a MAC that coldwire computes
-- with this database's secret, which only the catalog's owner (coldwire's service role)
-- can read; the function (SECURITY DEFINER, owned by the same role) recomputes it over
-- the rows and keys it was given and refuses the call (42501) when they differ. The
-- capture upgrade that runs with this step makes every table's function anew with the
-- MAC argument and drops the unsigned one; the shared coldwire.rehydrate of catalogs
-- before version 10, unsigned too, is dropped here.
--
-- The secret is 32 bytes: SHA-256 of three random (version 4) UUIDs, which Postgres
-- draws from its strong random source. One row, kept if the step runs again; REVOKE ALL
-- keeps it from PUBLIC.

CREATE TABLE IF NOT EXISTS coldwire.secret (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    key bytea NOT NULL CHECK (length(key) = 32)
);
REVOKE ALL ON coldwire.secret FROM PUBLIC;
INSERT INTO coldwire.secret (key)
SELECT pg_catalog.sha256(pg_catalog.convert_to(
    pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text
    || pg_catalog.gen_random_uuid()::text, 'UTF8'))
ON CONFLICT DO NOTHING;

DROP FUNCTION IF EXISTS coldwire.rehydrate(bigint, bigint, anyarray, jsonb, text, text, boolean);
DROP FUNCTION IF EXISTS coldwire.rehydrate(bigint, bigint, anyarray, jsonb);
