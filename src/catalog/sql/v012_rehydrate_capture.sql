-- coldwire catalog, version 12: the capture function leaves a rehydration's insert alone.
--
-- A rehydration (coldwire.rehydrate_<id>) claims each cold row's key in the mirror and
-- inserts the rows it claimed into the heap, in one statement. The table's INSERT capture
-- trigger then fired for that insert and did the work again: it checked the keys against
-- the cold tier's bounds and the mirror, and upserted them into the mirror, about 35 µs of
-- the rehydration's 85 µs. The capture upgrade that runs with this step makes each tiered
-- table's capture function return at once when its error context shows that it fired for
-- exactly that statement of exactly that function (catalog::capture in the source).
SELECT 1;
