//! Real client programs through coldwire: psql's meta-commands and \copy, pgbench.

mod common;

use std::process::{Command, Output};

use common::{connect_direct, create_db, pg_bin, Proxy};

fn run(program: &str, args: &[&str]) -> Output {
    let out = Command::new(pg_bin(program))
        .args(args)
        .env_remove("PGSSLMODE")
        .output()
        .expect("run client");
    assert!(
        out.status.success(),
        "{program} {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn psql_meta_commands_and_copy() {
    let db = create_db("psql");
    let proxy = Proxy::start(&[]).await;
    let url = proxy.url("postgres", &db);
    run(
        "psql",
        &[
            "-X",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            &url,
            "-c",
            "CREATE TABLE accounts(id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2))",
        ],
    );

    let described = stdout(&run("psql", &["-X", "-d", &url, "-c", "\\d accounts"]));
    assert!(
        described.contains("Table \"public.accounts\""),
        "{described}"
    );
    assert!(described.contains("numeric(12,2)"));
    assert!(described.contains("\"accounts_pkey\" PRIMARY KEY, btree (id)"));
    let listed = stdout(&run("psql", &["-X", "-d", &url, "-c", "\\dt"]));
    assert!(
        listed.contains("accounts") && listed.contains("table"),
        "{listed}"
    );

    // \copy in from a file and back out, through coldwire.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.csv");
    let mut csv = String::new();
    for i in 0..5000 {
        csv.push_str(&format!("{i},\"owner, {i}\",{}.25\n", i * 3));
    }
    std::fs::write(&input, &csv).unwrap();
    let copy_in = format!(
        "\\copy accounts FROM '{}' WITH (FORMAT csv)",
        input.display()
    );
    let out = stdout(&run("psql", &["-X", "-d", &url, "-c", &copy_in]));
    assert!(out.contains("COPY 5000"), "{out}");
    let output = dir.path().join("out.csv");
    let copy_out = format!(
        "\\copy (SELECT * FROM accounts ORDER BY id) TO '{}' WITH (FORMAT csv)",
        output.display()
    );
    run("psql", &["-X", "-d", &url, "-c", &copy_out]);
    assert_eq!(std::fs::read_to_string(&output).unwrap(), csv);

    let direct = connect_direct(&db).await;
    let total: String = direct
        .query_one("SELECT sum(balance)::text FROM accounts", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        total,
        format!("{}.00", (0..5000).map(|i| i * 3).sum::<i64>() + 5000 / 4)
    );
}

#[tokio::test]
async fn pgbench_initializes_and_runs_prepared_through_coldwire() {
    let db = create_db("pgbench");
    let proxy = Proxy::start(&[]).await;
    let host = proxy.addr.ip().to_string();
    let port = proxy.addr.port().to_string();
    let conn = ["-h", host.as_str(), "-p", port.as_str(), "-U", "postgres"];
    let mut init = conn.to_vec();
    init.extend(["-i", "-s", "1", "-q", &db]);
    run("pgbench", &init);
    let direct = connect_direct(&db).await;
    let accounts: i64 = direct
        .query_one("SELECT count(*) FROM pgbench_accounts", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(accounts, 100_000);

    for mode in [
        ["-S", "-M", "prepared"],
        ["-S", "-M", "simple"],
        ["-N", "-M", "extended"],
    ] {
        let mut bench = conn.to_vec();
        bench.extend(mode);
        bench.extend(["-c", "4", "-j", "2", "-T", "2", "-n", &db]);
        let out = stdout(&run("pgbench", &bench));
        assert!(out.contains("number of failed transactions: 0"), "{out}");
        let processed: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
            .and_then(|v| v.split('/').next()?.trim().parse().ok())
            .unwrap_or(0);
        assert!(
            processed > 100,
            "only {processed} transactions in {mode:?}:\n{out}"
        );
    }
}
