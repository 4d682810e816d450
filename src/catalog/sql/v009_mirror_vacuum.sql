-- coldwire catalog, version 9: mirrors kept all-visible.
--
-- Every aggregate answered from cold partials checks the mirror's keys inside the cold
-- key range with an index-only scan, which visits the heap for every key on a page not
-- yet marked all-visible. Autovacuum's defaults wait for a fifth of a table to change, so
-- after a burst of writes to cold rows those pages stayed unmarked for hours. The capture
-- upgrade that runs with this step gives each mirror autovacuum thresholds of its own
-- (catalog::capture in the source); new mirrors get them when created. Nothing else
-- changes.
SELECT 1;
