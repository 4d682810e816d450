// node-postgres (pg) against a tiered table through coldwire (tests/node_clients.rs).
//
// Usage: node node_clients.js URL TABLE ROWS COLD_MAX
// (NODE_PATH names the node_modules holding pg and pg-copy-streams)
//
// TABLE was seeded as tests/clients/python_clients.py describes, keys 1..COLD_MAX cold.
// node-postgres sends parameters in the extended protocol with text results; named
// queries ({name, text, values}) are prepared once per connection. Every check compares
// with what a plain table would answer; the first difference exits with status 1.
'use strict';
const { Client } = require('pg');
const copyStreams = require('pg-copy-streams');
const { finished } = require('stream/promises');

const [url, table, rowsArg, coldArg] = process.argv.slice(2);
const rows = Number(rowsArg);
const coldMax = Number(coldArg);
const cold = Math.floor(coldMax / 2);
const hot = coldMax + 1;

// The seeded row g as node-postgres returns it (int8 and numeric as text).
function rowOf(g) {
  return {
    id: String(g),
    owner: 'o' + (g % 7),
    balance: (g * 1.25).toFixed(2),
    at: new Date(Date.UTC(2026, 0, 1) + g * 60000).toISOString(),
    tags: ['t' + (g % 3), 'x'],
  };
}

function normal(row) {
  return { ...row, at: row.at instanceof Date ? row.at.toISOString() : row.at };
}

function check(what, got, want) {
  const [g, w] = [JSON.stringify(got), JSON.stringify(want)];
  if (g !== w) {
    console.log(`FAIL ${what}: got ${g}, want ${w}`);
    process.exit(1);
  }
  console.log(`ok   ${what}`);
}

async function main() {
  const c = new Client({ connectionString: url });
  await c.connect();
  const select = `SELECT id, owner, balance, at, tags FROM ${table} WHERE id = $1`;
  let r = await c.query(`SELECT count(*)::int AS n, sum(balance)::text AS s FROM ${table}`);
  check('count and sum over hot and cold rows', r.rows[0], { n: rows, s: ((rows * (rows + 1)) / 2 * 1.25).toFixed(2) });
  for (const key of [cold, hot]) {
    r = await c.query(select, [key]);
    check(`read of key ${key}`, normal(r.rows[0]), rowOf(key));
    r = await c.query({ name: 'by_key', text: select, values: [key] });
    check(`prepared read of key ${key}`, normal(r.rows[0]), rowOf(key));
    r = await c.query({ text: select, values: [key], rowMode: 'array' });
    check(`array-mode read of key ${key}`, r.rows[0].length, 5);
  }
  r = await c.query(`SELECT id FROM ${table} WHERE id = ANY($1::bigint[]) ORDER BY id`, [[cold, hot, rows + 100]]);
  check('= ANY of a bound array', r.rows.map((x) => x.id), [String(cold), String(hot)]);

  r = await c.query(`UPDATE ${table} SET balance = balance + 1 WHERE id = $1`, [cold]);
  check('update of a cold row', r.rowCount, 1);
  r = await c.query({ name: 'by_key', text: select, values: [cold] });
  check('the update is read back', r.rows[0].balance, (cold * 1.25 + 1).toFixed(2));
  r = await c.query(`DELETE FROM ${table} WHERE id = $1`, [cold - 1]);
  check('delete of a cold row', r.rowCount, 1);
  r = await c.query(`SELECT count(*)::int AS n FROM ${table}`);
  check('count after the delete', r.rows[0].n, rows - 1);

  await c.query('BEGIN');
  await c.query(`UPDATE ${table} SET owner = 'committed' WHERE id = $1`, [cold - 2]);
  r = await c.query({ name: 'by_key', text: select, values: [cold - 2] });
  check('read inside the transaction', r.rows[0].owner, 'committed');
  await c.query('COMMIT');
  await c.query('BEGIN');
  await c.query(`UPDATE ${table} SET owner = 'rolled back' WHERE id = $1`, [cold - 3]);
  await c.query('ROLLBACK');
  r = await c.query(`SELECT id, owner FROM ${table} WHERE id IN ($1, $2) ORDER BY id`, [cold - 3, cold - 2]);
  check('committed and rolled-back updates', r.rows, [
    { id: String(cold - 3), owner: rowOf(cold - 3).owner },
    { id: String(cold - 2), owner: 'committed' },
  ]);
  // COPY out (every row, hot and cold, once) and in (a new hot row), by pg-copy-streams.
  const out = c.query(copyStreams.to(`COPY ${table} (id) TO STDOUT`));
  let text = '';
  for await (const chunk of out) text += chunk.toString();
  const copied = text.trim().split('\n').map(Number).sort((a, b) => a - b);
  const every = [];
  for (let g = 1; g <= rows; g++) if (g !== cold - 1) every.push(g);
  check('COPY TO STDOUT has every row once', copied, every);
  const into = c.query(copyStreams.from(`COPY ${table} (id, owner, balance, at, tags) FROM STDIN`));
  into.end(`${rows + 1}\tcopied\t1.50\t2026-01-01 00:00:00+00\t{a,b}\n`);
  await finished(into);
  r = await c.query({ name: 'by_key', text: select, values: [rows + 1] });
  check('COPY FROM STDIN row read back', [r.rows[0].owner, r.rows[0].balance, r.rows[0].tags], ['copied', '1.50', ['a', 'b']]);
  await c.query(`DELETE FROM ${table} WHERE id = $1`, [rows + 1]);

  // A simple-protocol multi-statement string.
  r = await c.query(`SELECT count(*)::int AS n FROM ${table} WHERE id <= ${coldMax}; SELECT 1 AS one`);
  check('multi-statement simple query', [r[0].rows[0].n, r[1].rows[0].one], [coldMax - 1, 1]);
  await c.end();
  console.log('all checks passed (node-postgres)');
}

main().catch((e) => {
  console.log(`FAIL ${e.stack || e}`);
  process.exit(1);
});
