-- Catalog v6: capture functions name their table by oid when it no longer has the name
-- they were made with (a rename or a move to another schema that coldwire has not yet
-- followed), and name it as it is now in their errors. The functions themselves are made
-- again by the capture upgrade that runs with this step; nothing else changes.
SELECT 1;
