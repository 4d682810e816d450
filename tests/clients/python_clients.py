"""Real Python drivers against a tiered table through coldwire (tests/python_clients.rs).

Usage: python_clients.py DRIVER URL TABLE ROWS COLD_MAX

DRIVER is "psycopg" (psycopg 3: server-side parameters in text and binary, prepared and
unprepared statements, transactions, COPY) or "asyncpg" (prepared statements and binary
results everywhere). TABLE was seeded with ROWS rows (row g: owner 'o' || g % 7, balance
g * 1.25, at 2026-01-01 plus g minutes, tags {t<g % 3>, x}) and flushed so that keys
1..COLD_MAX are cold. Every check compares with what a plain table would answer; the
first difference fails the script (exit status 1) with the check named.
"""

import asyncio
import datetime
import decimal
import io
import sys

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def row_of(g):
    """The seeded row g, as the drivers return it."""
    return (
        g,
        "o%d" % (g % 7),
        decimal.Decimal(g * 125) / 100,
        START + datetime.timedelta(minutes=g),
        ["t%d" % (g % 3), "x"],
    )


def check(what, got, want):
    if got != want:
        print("FAIL %s: got %r, want %r" % (what, got, want))
        sys.exit(1)
    print("ok   %s" % what)


def seeded_sum(rows):
    return decimal.Decimal(125 * rows * (rows + 1) // 2) / 100


def run_psycopg(url, table, rows, cold_max):
    import psycopg

    select = "SELECT id, owner, balance, at, tags FROM %s WHERE id = %%s" % table
    cold, hot = cold_max // 2, cold_max + 1
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute("SELECT count(*), sum(balance) FROM %s" % table)
        check("count and sum over hot and cold rows", cur.fetchone(), (rows, seeded_sum(rows)))
        for key in (cold, hot):
            cur.execute(select, (key,))
            check("text read of key %d" % key, cur.fetchone(), row_of(key))
            cur.execute(select, (key,), prepare=True)
            check("prepared read of key %d" % key, cur.fetchone(), row_of(key))
            binary = conn.cursor(binary=True)
            binary.execute(select, (key,))
            check("binary read of key %d" % key, binary.fetchone(), row_of(key))
        cur.execute(
            "SELECT id FROM %s WHERE id BETWEEN %%s AND %%s ORDER BY id" % table,
            (cold_max - 2, cold_max + 2),
        )
        check("range across the cold boundary", [r[0] for r in cur.fetchall()],
              list(range(cold_max - 2, cold_max + 3)))

        cur.execute("UPDATE %s SET balance = balance + 1 WHERE id = %%s" % table, (cold,))
        check("update of a cold row", cur.rowcount, 1)
        cur.execute("SELECT balance FROM %s WHERE id = %%s" % table, (cold,))
        check("the update is read back", cur.fetchone()[0], row_of(cold)[2] + 1)
        cur.execute("DELETE FROM %s WHERE id = %%s" % table, (cold - 1,))
        check("delete of a cold row", cur.rowcount, 1)
        cur.execute("SELECT count(*) FROM %s" % table)
        check("count after the delete", cur.fetchone()[0], rows - 1)

    with psycopg.connect(url) as conn:
        # Transactions: an update committed, one rolled back.
        with conn.transaction():
            conn.execute("UPDATE %s SET owner = 'committed' WHERE id = %%s" % table, (cold - 2,))
            got = conn.execute("SELECT owner FROM %s WHERE id = %%s" % table, (cold - 2,)).fetchone()
            check("read inside the transaction", got[0], "committed")
        try:
            with conn.transaction():
                conn.execute("UPDATE %s SET owner = 'rolled back' WHERE id = %%s" % table, (cold - 3,))
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        got = conn.execute(
            "SELECT id, owner FROM %s WHERE id IN (%%s, %%s) ORDER BY id" % table, (cold - 3, cold - 2)
        ).fetchall()
        check("committed and rolled-back updates", got, [(cold - 3, row_of(cold - 3)[1]), (cold - 2, "committed")])

        # COPY out (every row, hot and cold) and in (new hot rows).
        cur = conn.cursor()
        out = io.StringIO()
        with cur.copy("COPY %s (id) TO STDOUT" % table) as copy:
            for block in copy:
                out.write(bytes(block).decode())
        ids = sorted(int(line) for line in out.getvalue().split())
        check("COPY TO STDOUT has every row once", ids, [g for g in range(1, rows + 1) if g != cold - 1])
        with cur.copy("COPY %s (id, owner, balance, at, tags) FROM STDIN" % table) as copy:
            for g in (rows + 1, rows + 2):
                copy.write_row(row_of(g))
        conn.commit()
        cur.execute("SELECT count(*) FROM %s" % table)
        check("count after COPY FROM STDIN", cur.fetchone()[0], rows + 1)


async def run_asyncpg(url, table, rows, cold_max):
    import asyncpg

    cold, hot = cold_max // 2, cold_max + 1
    conn = await asyncpg.connect(url)
    try:
        got = tuple(await conn.fetchrow("SELECT count(*), sum(balance) FROM %s" % table))
        check("count and sum over hot and cold rows", got, (rows, seeded_sum(rows)))
        stmt = await conn.prepare("SELECT id, owner, balance, at, tags FROM %s WHERE id = $1" % table)
        for key in (cold, hot):
            check("prepared read of key %d" % key, tuple(await stmt.fetchrow(key)), row_of(key))
        got = await conn.fetch("SELECT id FROM %s WHERE id = ANY($1::bigint[]) ORDER BY id" % table,
                               [cold, hot, rows + 100])
        check("= ANY of a bound array", [r["id"] for r in got], [cold, hot])

        status = await conn.execute("UPDATE %s SET balance = balance + 1 WHERE id = $1" % table, cold)
        check("update of a cold row", status, "UPDATE 1")
        check("the update is read back", (await stmt.fetchrow(cold))["balance"], row_of(cold)[2] + 1)
        status = await conn.execute("DELETE FROM %s WHERE id = $1" % table, cold - 1)
        check("delete of a cold row", status, "DELETE 1")
        check("count after the delete", await conn.fetchval("SELECT count(*) FROM %s" % table), rows - 1)

        async with conn.transaction():
            await conn.execute("UPDATE %s SET owner = 'committed' WHERE id = $1" % table, cold - 2)
            check("read inside the transaction", (await stmt.fetchrow(cold - 2))["owner"], "committed")
        try:
            async with conn.transaction():
                await conn.execute("UPDATE %s SET owner = 'rolled back' WHERE id = $1" % table, cold - 3)
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        check("a rolled-back update", (await stmt.fetchrow(cold - 3))["owner"], row_of(cold - 3)[1])

        out = io.BytesIO()
        await conn.copy_from_table(table, columns=["id"], output=out)
        ids = sorted(int(line) for line in out.getvalue().split())
        check("COPY TO STDOUT has every row once", ids, [g for g in range(1, rows + 1) if g != cold - 1])
        await conn.copy_records_to_table(table, records=[row_of(rows + 1)],
                                         columns=["id", "owner", "balance", "at", "tags"])
        check("count after COPY FROM STDIN", await conn.fetchval("SELECT count(*) FROM %s" % table), rows)
    finally:
        await conn.close()


def main():
    driver, url, table, rows, cold_max = sys.argv[1:6]
    rows, cold_max = int(rows), int(cold_max)
    if driver == "psycopg":
        run_psycopg(url, table, rows, cold_max)
    elif driver == "asyncpg":
        asyncio.run(run_asyncpg(url, table, rows, cold_max))
    else:
        sys.exit("unknown driver %s" % driver)
    print("all checks passed (%s)" % driver)


if __name__ == "__main__":
    main()
