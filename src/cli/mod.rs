//! The operator's command line: `coldwire status`, `tier`, `untier`, `policy` and `flush`,
//! talking to Postgres through `service_url`. Each is a client of the admin calls the
//! proxy answers (the same executor, in this process, as the service user), so what the
//! SQL can do the command does, with the same checks and errors. `flush` runs the job
//! itself unless a proxy's executor claims it first, and shows its progress.
//!
//! Exit codes: 0 done; 1 refused or failed (the message says why); 2 a usage error (clap).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;

use crate::admin::args::Resolved;
use crate::admin::{AdminExecutor, AdminFunction, AdminRequest};
use crate::catalog::inspect::TableRef;
use crate::catalog::jobs::{self, Job};
use crate::cold::scan::ScanLimits;
use crate::config::Config;
use crate::session::databases::Databases;
use crate::store::ColdStore;

/// What the command line was asked to do.
#[derive(Debug, Clone)]
pub enum Action {
    /// Tiered tables, their rows in each tier, segments, last flush and running jobs.
    Status {
        exact: bool,
        json: bool,
    },
    Tier {
        table: String,
        policy: Option<String>,
    },
    Untier {
        table: String,
    },
    Policy {
        table: String,
        policy: String,
    },
    Flush {
        table: String,
        drain: bool,
        wait: bool,
    },
}

/// How often a waiting `flush` looks at its job.
const POLL: Duration = Duration::from_millis(250);
/// Attempts a waiting `flush` makes of its job (and errors in a row it bears claiming
/// the job or reading its state) before it gives up, leaving the job to a proxy's
/// executor.
const MAX_ATTEMPTS: u32 = 5;
/// How often, without a terminal, a waiting `flush` prints a progress line.
const PLAIN_PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// Runs `action` on the tables of `database` (default: `service_url`'s), reached and
/// checked as a proxy with `config` reaches them: service_url's database is the default
/// one, another is served beside it with its tables in a folder of the cold store.
///
/// # Errors
/// No `service_url`, an unreachable database or store, a catalog that records another
/// cold store, a refused call, a failed job.
pub async fn run(config: Config, database: Option<String>, action: Action) -> anyhow::Result<()> {
    crate::catalog::policy::set_defaults_for_new_tables(crate::server::policy_defaults(&config)?);
    let service = config
        .service()?
        .context("no service_url: pass --service-url (or COLDWIRE_SERVICE_URL, or service_url in the config file)")?;
    let default_database = crate::catalog::service_database(&service);
    let database = database.unwrap_or_else(|| default_database.clone());
    let mut here = service.clone();
    here.dbname(&database);
    let target = crate::catalog::describe(&here);
    let client = crate::catalog::connect(&here)
        .await
        .with_context(|| format!("cannot connect to {target}"))?;
    if let Action::Status { exact, json } = action {
        return status(&client, exact, json).await;
    }
    // The same catalog version a proxy of this build would run against.
    let mut default_client = crate::catalog::connect(&service)
        .await
        .with_context(|| format!("cannot connect to {}", crate::catalog::describe(&service)))?;
    crate::catalog::migrate(&mut default_client)
        .await
        .with_context(|| format!("the coldwire catalog of database {default_database}"))?;
    let store = ColdStore::open_checked(
        &config.cold_store,
        &config.cold_store_options(),
        config.connect_timeout(),
    )
    .await?;
    let databases = Databases::new(
        service.clone(),
        store.clone(),
        ScanLimits::configured(config.max_cold_rows, config.max_cold_memory_mb),
        config.max_rehydrate_rows,
        config.max_databases,
    );
    databases.claim_default_store().await?;
    // Another database is opened as the proxy opens it (catalog, store check, listed in
    // the default one): by a tier, or when it has tiered tables already.
    if database != default_database
        && (matches!(action, Action::Tier { .. }) || has_catalog(&client).await?)
    {
        databases.open(&database).await?;
    }
    let call = |function: AdminFunction, args: Vec<Resolved>| AdminRequest {
        function,
        args,
        user: service.get_user().unwrap_or("postgres").to_owned(),
        database: database.clone(),
    };
    let table_arg = |t: &str| Resolved::Table(TableRef::Name(t.to_owned()));
    let json_arg = |text: &str| -> anyhow::Result<Resolved> {
        Ok(Resolved::Json(serde_json::from_str(text).with_context(
            || format!("the policy is not JSON: {text}"),
        )?))
    };
    let answer = |r: Result<Value, crate::admin::AdminError>| {
        r.map_err(|e| {
            let f = crate::error::admin_error(&e);
            let mut text = format!("{} (SQLSTATE {})", f.message, f.code);
            for (label, extra) in [("DETAIL", &f.detail), ("HINT", &f.hint)] {
                if let Some(extra) = extra {
                    text.push_str(&format!("\n{label}: {extra}"));
                }
            }
            anyhow::anyhow!(text)
        })
    };
    match action {
        Action::Status { .. } => unreachable!("answered above"),
        Action::Tier { table, policy } => {
            let policy = match policy {
                Some(p) => json_arg(&p)?,
                None => Resolved::Default,
            };
            let done = answer(
                databases
                    .execute(call(
                        AdminFunction::TierTable,
                        vec![table_arg(&table), policy],
                    ))
                    .await,
            )?;
            println!(
                "tiered {} (id {}): {} rows recorded; {}",
                done["table"].as_str().unwrap_or(&table),
                done["id"],
                done["mirror_rows"],
                policy_in_words(&done["policy"])
            );
        }
        Action::Policy { table, policy } => {
            let done = answer(
                databases
                    .execute(call(
                        AdminFunction::SetPolicy,
                        vec![table_arg(&table), json_arg(&policy)?],
                    ))
                    .await,
            )?;
            println!(
                "{}: {}",
                done["table"].as_str().unwrap_or(&table),
                policy_in_words(&done["policy"])
            );
        }
        Action::Untier { table } => {
            let done = answer(
                databases
                    .execute(call(AdminFunction::UntierTable, vec![table_arg(&table)]))
                    .await,
            )?;
            println!(
                "untiered {}: {} rows back in the heap from {} segments",
                done["table"].as_str().unwrap_or(&table),
                done["rows_rehydrated"],
                done["segments"]
            );
            if let Some(left) = done["objects_left"].as_str() {
                println!("cold objects left for the executor to delete: {left}");
            }
        }
        Action::Flush { table, drain, wait } => {
            let queued = answer(
                databases
                    .execute(call(
                        AdminFunction::FlushTable,
                        vec![
                            table_arg(&table),
                            Resolved::Bool(false),
                            Resolved::Bool(drain),
                        ],
                    ))
                    .await,
            )?;
            let job_id = queued["job_id"]
                .as_i64()
                .context("flush_table answered no job")?;
            let name = queued["table"].as_str().unwrap_or(&table).to_owned();
            if !wait {
                println!("flush of {name} queued: job {job_id}");
                return Ok(());
            }
            let job = follow_flush(&here, &store, job_id, &name).await?;
            match job.state.as_str() {
                "completed" => println!(
                    "flush of {name} completed: {} rows in {} segments (job {job_id})",
                    job.rows_done, job.segments
                ),
                _ => bail!(
                    "flush of {name} {}: {} (job {job_id})",
                    job.state,
                    job.error.as_deref().unwrap_or("no error recorded")
                ),
            }
        }
    }
    Ok(())
}

fn policy_in_words(policy: &Value) -> String {
    crate::catalog::Policy::default()
        .merged(policy)
        .map(|p| p.in_words())
        .unwrap_or_else(|e| e.to_string())
}

/// Runs job `job_id` in this process whenever no executor runs it (at first, and again
/// when an attempt lost its connection, which leaves the job `running` with no executor
/// holding its lock, or the proxy that ran it went away), and follows it to its end,
/// with a progress bar on a terminal and a line every few seconds otherwise. A failed
/// attempt fails the job for good (`jobs::fail`), as in a proxy's executor.
async fn follow_flush(
    service: &tokio_postgres::Config,
    store: &ColdStore,
    job_id: i64,
    name: &str,
) -> anyhow::Result<Job> {
    let label = format!("coldwire-cli:{}", std::process::id());
    // Connections: one that claims and runs the job, one that reads its state.
    let (mut worker, mut watcher): (
        Option<tokio_postgres::Client>,
        Option<tokio_postgres::Client>,
    ) = (None, None);
    let mut runner: Option<tokio::task::JoinHandle<tokio_postgres::Client>> = None;
    // Attempts this command started; errors in a row claiming the job, reading its state.
    let (mut attempts, mut claim_errors, mut read_errors) = (0u32, 0u32, 0u32);
    let mut followed = false;
    let mut unfinished = true;
    let terminal = std::io::stderr().is_terminal();
    let bar = terminal.then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:40}] {pos}/{len} rows ({elapsed}, eta {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_message(format!("flush {name}"));
        bar
    });
    let started = Instant::now();
    let mut printed = Instant::now();
    let job = loop {
        // An attempt that just ended is judged by the job's state, read below first.
        let ended = runner.take_if(|r| r.is_finished());
        let just_ended = ended.is_some();
        if let Some(ended) = ended {
            worker = Some(ended.await.context("the flush task")?);
        }
        if runner.is_none() && unfinished && !just_ended {
            if attempts >= MAX_ATTEMPTS {
                bail!("job {job_id} is still unfinished after {attempts} attempts by this command; `coldwire status` shows it, and a proxy's executor takes it over");
            }
            match claim(worker.take(), service, &label, job_id).await {
                Ok((mut w, Some(job))) => {
                    attempts += 1;
                    (claim_errors, followed) = (0, true);
                    if attempts > 1 {
                        eprintln!("job {job_id} is unfinished and no executor runs it: running it again (attempt {attempts} of {MAX_ATTEMPTS} by this command)");
                    }
                    let (service, store) = (service.clone(), store.clone());
                    runner = Some(tokio::spawn(async move {
                        crate::flush::executor::execute_claimed(&mut w, &service, &store, &job)
                            .await;
                        w
                    }));
                }
                Ok((w, None)) => {
                    claim_errors = 0;
                    if !followed {
                        eprintln!("job {job_id} is run by a proxy's executor; following it");
                        followed = true;
                    }
                    worker = Some(w);
                }
                Err(e) => {
                    claim_errors += 1;
                    if claim_errors >= MAX_ATTEMPTS {
                        return Err(give_up(
                            runner,
                            e.context(format!("cannot claim job {job_id}")),
                        )
                        .await);
                    }
                    eprintln!("job {job_id}: cannot claim it ({e:#}); trying again");
                }
            }
        }
        let job = match state(watcher.take(), service, job_id).await {
            Ok((w, job)) => {
                (watcher, read_errors) = (Some(w), 0);
                job
            }
            Err(e) => {
                read_errors += 1;
                if read_errors >= MAX_ATTEMPTS {
                    return Err(
                        give_up(runner, e.context(format!("cannot read job {job_id}"))).await,
                    );
                }
                eprintln!("job {job_id}: cannot read its state ({e:#}); trying again");
                tokio::time::sleep(POLL).await;
                continue;
            }
        };
        let (done, total) = (job.rows_done, job.rows_total.unwrap_or(0));
        // Rows count as done when their segment is published; then the heap is pruned.
        let phase = if total > 0 && done >= total {
            "pruning the heap"
        } else {
            "writing segments"
        };
        if let Some(bar) = &bar {
            bar.set_length(total.max(0) as u64);
            bar.set_position(done.max(0) as u64);
            bar.set_message(format!("flush {name}: {phase}"));
        } else if printed.elapsed() >= PLAIN_PROGRESS_EVERY {
            printed = Instant::now();
            eprintln!(
                "flush {name}: {done}/{total} rows written, {phase}, {:.0} s",
                started.elapsed().as_secs_f64()
            );
        }
        unfinished = matches!(job.state.as_str(), "pending" | "running");
        if !unfinished {
            break job;
        }
        tokio::time::sleep(POLL).await;
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if let Some(runner) = runner {
        runner.await.context("the flush task")?;
    }
    Ok(job)
}

/// Claims job `job_id` on `worker` (a new connection where it is gone or closed), giving
/// the connection back with the job when it was free to claim.
async fn claim(
    worker: Option<tokio_postgres::Client>,
    service: &tokio_postgres::Config,
    label: &str,
    job_id: i64,
) -> anyhow::Result<(tokio_postgres::Client, Option<Job>)> {
    let mut w = match worker {
        Some(w) if !w.is_closed() => w,
        _ => crate::catalog::connect(service).await?,
    };
    let job = jobs::claim_job(&mut w, label, job_id).await?;
    Ok((w, job))
}

/// Job `job_id` as it stands, read on `watcher` (a new connection where it is gone or
/// closed), which it gives back.
async fn state(
    watcher: Option<tokio_postgres::Client>,
    service: &tokio_postgres::Config,
    job_id: i64,
) -> anyhow::Result<(tokio_postgres::Client, Job)> {
    let w = match watcher {
        Some(w) if !w.is_closed() => w,
        _ => crate::catalog::connect(service).await?,
    };
    let job = jobs::get(&w, job_id).await?;
    Ok((w, job))
}

/// `error`, once this command's attempt in flight (if any) has ended: it ends with the
/// job, or when its connection fails.
async fn give_up(
    runner: Option<tokio::task::JoinHandle<tokio_postgres::Client>>,
    error: anyhow::Error,
) -> anyhow::Error {
    if let Some(runner) = runner {
        eprintln!("waiting for this command's attempt to end");
        let _ = runner.await;
    }
    error
}

/// Whether the connected database has a coldwire catalog.
async fn has_catalog(client: &tokio_postgres::Client) -> anyhow::Result<bool> {
    Ok(client
        .query_one("SELECT to_regclass('coldwire.tables') IS NOT NULL", &[])
        .await?
        .get(0))
}

/// Prints every tiered table (exact counts with `exact`: one `count(*)` per heap and
/// mirror; otherwise Postgres's running estimates, marked `~`), and the running jobs.
async fn status(client: &tokio_postgres::Client, exact: bool, json: bool) -> anyhow::Result<()> {
    if !has_catalog(client).await? {
        bail!("no coldwire catalog in this database: start `coldwire serve` with this service_url once, or tier a table with `coldwire tier`");
    }
    let rows = client
        .query(
            "SELECT s.table_id, format('%I.%I', s.schema_name, s.table_name), s.state, s.hot_rows, s.mirror_rows, \
                    s.cold_rows, s.cold_bytes, s.segments, s.generation, \
                    to_char(s.last_flush, 'YYYY-MM-DD HH24:MI:SSOF'), s.queued_jobs, t.policy \
             FROM coldwire.status s JOIN coldwire.tables t ON t.id = s.table_id ORDER BY 2",
            &[],
        )
        .await?;
    let mut tables = Vec::new();
    for r in &rows {
        let id: i64 = r.get(0);
        let name: String = r.get(1);
        let (mut hot, mut mirror): (Option<i64>, Option<i64>) = (r.get(3), r.get(4));
        let mut counted = false;
        if exact && r.get::<_, String>(2) == "active" {
            let counts = client
                .query_one(
                    &format!(
                        "SELECT (SELECT count(*) FROM ONLY {name}), (SELECT count(*) FROM coldwire.m_{id})"
                    ),
                    &[],
                )
                .await?;
            (hot, mirror) = (counts.get(0), counts.get(1));
            counted = true;
        }
        tables.push(serde_json::json!({
            "table": name,
            "id": id,
            "state": r.get::<_, String>(2),
            "hot_rows": hot,
            "mirror_rows": mirror,
            "counts": if counted { "exact" } else { "estimated" },
            "cold_rows": r.get::<_, i64>(5),
            "cold_bytes": r.get::<_, i64>(6),
            "segments": r.get::<_, i64>(7),
            "generation": r.get::<_, i64>(8),
            "last_flush": r.get::<_, Option<String>>(9),
            "queued_jobs": r.get::<_, i64>(10),
            "policy": policy_in_words(&r.get::<_, Value>(11)),
        }));
    }
    let running: Vec<Value> = client
        .query(
            "SELECT j.id, format('%I.%I', t.schema_name, t.table_name), j.kind, j.state, j.rows_done, j.rows_total, \
                    j.attempt, j.claimed_by, extract(epoch FROM now() - coalesce(j.started_at, j.created_at))::float8 \
             FROM coldwire.jobs j JOIN coldwire.tables t ON t.id = j.table_id \
             WHERE j.state IN ('pending', 'running') ORDER BY j.id",
            &[],
        )
        .await?
        .iter()
        .map(|r| {
            serde_json::json!({
                "job_id": r.get::<_, i64>(0),
                "table": r.get::<_, String>(1),
                "kind": r.get::<_, String>(2),
                "state": r.get::<_, String>(3),
                "rows_done": r.get::<_, Option<i64>>(4),
                "rows_total": r.get::<_, Option<i64>>(5),
                "attempt": r.get::<_, i32>(6),
                "claimed_by": r.get::<_, Option<String>>(7),
                "seconds": r.get::<_, Option<f64>>(8).map(|s| s.round() as i64),
            })
        })
        .collect();
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(
            out,
            "{}",
            serde_json::json!({"tables": tables, "jobs": running})
        )?;
        return Ok(());
    }
    write!(out, "{}", status_text(&tables, &running))?;
    Ok(())
}

/// The human form of `coldwire status`: one aligned line per table, then the jobs.
fn status_text(tables: &[Value], jobs: &[Value]) -> String {
    if tables.is_empty() {
        return "no tiered tables\n".into();
    }
    let count = |v: &Value, estimated: bool| match v.as_i64() {
        Some(n) if estimated => format!("~{n}"),
        Some(n) => n.to_string(),
        None => "-".into(),
    };
    let header = [
        "table",
        "state",
        "hot",
        "mirror",
        "cold",
        "cold size",
        "segments",
        "gen",
        "last flush",
        "policy",
    ];
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for t in tables {
        let estimated = t["counts"] == "estimated";
        lines.push(vec![
            t["table"].as_str().unwrap_or_default().to_owned(),
            t["state"].as_str().unwrap_or_default().to_owned(),
            count(&t["hot_rows"], estimated),
            count(&t["mirror_rows"], estimated),
            count(&t["cold_rows"], false),
            human_bytes(t["cold_bytes"].as_i64().unwrap_or(0)),
            t["segments"].to_string(),
            t["generation"].to_string(),
            t["last_flush"].as_str().unwrap_or("never").to_owned(),
            t["policy"].as_str().unwrap_or_default().to_owned(),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in &lines {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    if tables.iter().any(|t| t["counts"] == "estimated") {
        out.push_str("~ Postgres's running estimates; --exact counts them\n");
    }
    for j in jobs {
        out.push_str(&format!(
            "job {} {} of {}: {}, {}/{} rows, attempt {}, {} s{}\n",
            j["job_id"],
            j["kind"].as_str().unwrap_or_default(),
            j["table"].as_str().unwrap_or_default(),
            j["state"].as_str().unwrap_or_default(),
            j["rows_done"].as_i64().unwrap_or(0),
            j["rows_total"]
                .as_i64()
                .map_or_else(|| "?".to_owned(), |n| n.to_string()),
            j["attempt"],
            j["seconds"],
            j["claimed_by"]
                .as_str()
                .map(|w| format!(", by {w}"))
                .unwrap_or_default()
        ));
    }
    out
}

fn human_bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn status_lines_up_and_marks_estimates() {
        let tables = [
            json!({"table": "public.events", "state": "active", "hot_rows": 100, "mirror_rows": 100,
                             "counts": "estimated", "cold_rows": 900, "cold_bytes": 123456, "segments": 3,
                             "generation": 2, "last_flush": null, "policy": "flush beyond 100 rows; on request only"}),
        ];
        let jobs = [
            json!({"job_id": 4, "kind": "flush", "table": "public.events", "state": "running",
                           "rows_done": 10, "rows_total": null, "attempt": 1, "seconds": 3, "claimed_by": "h:1"}),
        ];
        let text = status_text(&tables, &jobs);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("table          state   hot   mirror  cold"),
            "{text}"
        );
        assert!(
            lines[1].starts_with("public.events  active  ~100  ~100    900   123.5 kB   3"),
            "{text}"
        );
        assert!(
            lines[1].ends_with("never       flush beyond 100 rows; on request only"),
            "{text}"
        );
        assert!(lines[2].starts_with("~ "), "{text}");
        assert_eq!(
            lines[3],
            "job 4 flush of public.events: running, 10/? rows, attempt 1, 3 s, by h:1"
        );
        assert_eq!(status_text(&[], &[]), "no tiered tables\n");
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(1_500_000), "1.5 MB");
    }
}
