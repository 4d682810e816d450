// pgjdbc against a tiered table through coldwire (tests/jdbc_clients.rs).
//
// Usage: java -cp postgresql.jar JdbcClients.java JDBC_URL TABLE ROWS COLD_MAX
//
// TABLE was seeded as tests/clients/python_clients.py describes, keys 1..COLD_MAX cold.
// pgjdbc uses the extended protocol throughout: PreparedStatements become server-side
// statements after five executions (prepareThreshold), batches send several Bind/Execute
// pairs before one Sync, and CopyManager copies. Every check compares with what a plain
// table would answer; the first difference exits with status 1.
import java.math.BigDecimal;
import java.sql.*;
import java.io.StringWriter;
import org.postgresql.PGConnection;
import org.postgresql.copy.CopyManager;

public class JdbcClients {
    static void check(String what, Object got, Object want) {
        if (!String.valueOf(got).equals(String.valueOf(want))) {
            System.out.println("FAIL " + what + ": got " + got + ", want " + want);
            System.exit(1);
        }
        System.out.println("ok   " + what);
    }

    static String rowOf(long g) {
        return g + "|o" + (g % 7) + "|" + BigDecimal.valueOf(g * 125, 2) + "|t" + (g % 3) + ",x";
    }

    static String read(PreparedStatement ps, long key) throws SQLException {
        ps.setLong(1, key);
        try (ResultSet rs = ps.executeQuery()) {
            if (!rs.next()) return "none";
            Array tags = rs.getArray(5);
            String[] t = (String[]) tags.getArray();
            return rs.getLong(1) + "|" + rs.getString(2) + "|" + rs.getBigDecimal(3) + "|" + String.join(",", t);
        }
    }

    public static void main(String[] args) throws Exception {
        String url = args[0], table = args[1];
        long rows = Long.parseLong(args[2]), coldMax = Long.parseLong(args[3]);
        long cold = coldMax / 2, hot = coldMax + 1;
        try (Connection c = DriverManager.getConnection(url)) {
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery(
                    "SELECT count(*), sum(balance) FROM " + table)) {
                rs.next();
                check("count and sum over hot and cold rows", rs.getLong(1) + " " + rs.getBigDecimal(2),
                      rows + " " + BigDecimal.valueOf(125 * rows * (rows + 1) / 2, 2));
            }
            PreparedStatement ps = c.prepareStatement("SELECT id, owner, balance, at, tags FROM " + table + " WHERE id = ?");
            // Past prepareThreshold: the statement is prepared on the server and reused.
            for (int i = 0; i < 7; i++) {
                check("read of cold key " + (cold + i) + " (execution " + (i + 1) + ")", read(ps, cold + i), rowOf(cold + i));
                check("read of hot key " + (hot + i) + " (execution " + (i + 1) + ")", read(ps, hot + i), rowOf(hot + i));
            }
            ResultSetMetaData md = ps.getMetaData();
            check("column names of a read", md.getColumnName(1) + "," + md.getColumnName(3), "id,balance");
            // The documented limit: a read of a tiered table is answered from a derived
            // table, whose columns carry no table OID, so the driver names no table.
            check("getBaseTableName of a tiered table's column (documented: empty)",
                  "'" + ((org.postgresql.PGResultSetMetaData) md).getBaseTableName(1) + "'", "''");

            PreparedStatement up = c.prepareStatement("UPDATE " + table + " SET balance = balance + 1 WHERE id = ?");
            up.setLong(1, cold);
            check("update of a cold row", up.executeUpdate(), 1);
            check("the update is read back", read(ps, cold).split("\\|")[2], BigDecimal.valueOf(cold * 125 + 100, 2));
            // A batch: several Bind/Execute pairs of the write in one group, cold and hot keys.
            for (long k : new long[] {cold - 10, cold - 11, hot + 20, cold - 12}) {
                up.setLong(1, k);
                up.addBatch();
            }
            int[] counts = up.executeBatch();
            check("batched updates", java.util.Arrays.toString(counts), "[1, 1, 1, 1]");
            check("a batched update is read back", read(ps, cold - 11).split("\\|")[2], BigDecimal.valueOf((cold - 11) * 125 + 100, 2));
            PreparedStatement del = c.prepareStatement("DELETE FROM " + table + " WHERE id = ?");
            del.setLong(1, cold - 1);
            check("delete of a cold row", del.executeUpdate(), 1);

            c.setAutoCommit(false);
            up.setLong(1, cold - 2);
            up.executeUpdate();
            check("read inside the transaction", read(ps, cold - 2).split("\\|")[2], BigDecimal.valueOf((cold - 2) * 125 + 100, 2));
            c.commit();
            up.setLong(1, cold - 3);
            up.executeUpdate();
            c.rollback();
            c.setAutoCommit(true);
            check("committed update", read(ps, cold - 2), (cold - 2) + "|o" + ((cold - 2) % 7) + "|" + BigDecimal.valueOf((cold - 2) * 125 + 100, 2) + "|t" + ((cold - 2) % 3) + ",x");
            check("rolled-back update", read(ps, cold - 3), rowOf(cold - 3));

            CopyManager copy = c.unwrap(PGConnection.class).getCopyAPI();
            StringWriter out = new StringWriter();
            long copied = copy.copyOut("COPY " + table + " (id) TO STDOUT", out);
            check("COPY TO STDOUT counts every row", copied, rows - 1);
            check("COPY TO STDOUT lines", out.toString().split("\n").length, rows - 1);
        }
        System.out.println("all checks passed (pgjdbc)");
    }
}
