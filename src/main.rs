//! The `coldwire` command: `serve` runs the proxy, `demo` runs it on a throwaway Postgres.

use anyhow::Context;
use clap::{Parser, Subcommand};
use coldwire::cli::Action;
use coldwire::config::ServeArgs;
use coldwire::demo::DemoArgs;
use coldwire::server::{runtime, Server};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(
    name = "coldwire",
    version,
    about = "A Postgres proxy that gives ordinary tables a cold tier"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the proxy.
    Serve(ServeArgs),
    /// Run the proxy in front of a throwaway local Postgres (needs PostgreSQL binaries).
    Demo(DemoArgs),
    /// Tiered tables: rows hot, in the mirror and cold, segments, last flush, running jobs.
    Status {
        /// Count hot and mirror rows exactly (one count(*) each) instead of estimates.
        #[arg(long)]
        exact: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Tier a table (coldwire.tier_table).
    Tier {
        /// The table, as a regclass literal: events, app.events, "Mixed Case".
        table: String,
        /// The policy as JSON, e.g. '{"tier_after": "90 days", "age_column": "at"}'.
        #[arg(long)]
        policy: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Bring every cold row of a table back and make it plain (coldwire.untier_table).
    Untier {
        table: String,
        #[command(flatten)]
        target: Target,
    },
    /// Change some keys of a table's policy (coldwire.set_policy).
    Policy {
        table: String,
        /// The keys to change, as JSON, e.g. '{"hot_row_limit": 500000}'.
        policy: String,
        #[command(flatten)]
        target: Target,
    },
    /// Flush a table's due rows now and follow the job (coldwire.flush_table).
    Flush {
        table: String,
        /// Flush every hot row, not only those the policy makes due.
        #[arg(long)]
        drain: bool,
        /// Queue the job and exit without waiting for it.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        target: Target,
    },
}

/// Where an operator command works: the proxy's settings, and the database.
#[derive(clap::Args)]
struct Target {
    /// The database whose tables to work on when it is not service_url's: one the proxy
    /// serves beside it (pass the proxy's own service_url).
    #[arg(long)]
    database: Option<String>,
    #[command(flatten)]
    config: ServeArgs,
}

/// Replaces the log filter of the running process (SIGHUP, the `log` setting).
type LogFilter =
    tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, tracing_subscriber::Registry>;

/// The filter of RUST_LOG, else `coldwire=info`.
fn env_filter() -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "coldwire=info".into())
}

fn main() -> anyhow::Result<()> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let (filter, log_filter) = tracing_subscriber::reload::Layer::new(env_filter());
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            let config = args.resolve().context("configuration")?;
            set_log_filter(&log_filter, config.log.as_deref());
            runtime(config.worker_threads)?.block_on(serve(args, config, log_filter))
        }
        Command::Demo(args) => runtime(0)?.block_on(async {
            let shutdown = on_signal()?;
            Ok(coldwire::demo::run(args, shutdown).await?)
        }),
        Command::Status {
            exact,
            json,
            target,
        } => operate(target, Action::Status { exact, json }, &log_filter),
        Command::Tier {
            table,
            policy,
            target,
        } => operate(target, Action::Tier { table, policy }, &log_filter),
        Command::Untier { table, target } => operate(target, Action::Untier { table }, &log_filter),
        Command::Policy {
            table,
            policy,
            target,
        } => operate(target, Action::Policy { table, policy }, &log_filter),
        Command::Flush {
            table,
            drain,
            no_wait,
            target,
        } => operate(
            target,
            Action::Flush {
                table,
                drain,
                wait: !no_wait,
            },
            &log_filter,
        ),
    }
}

/// Runs an operator command; a refusal or failure exits 1 with its message. Its output is
/// its answer: the log shows warnings only, unless `log` or RUST_LOG asks for more.
fn operate(target: Target, action: Action, log_filter: &LogFilter) -> anyhow::Result<()> {
    let config = target.config.resolve().context("configuration")?;
    let quiet = std::env::var_os("RUST_LOG")
        .is_none()
        .then_some("coldwire=warn");
    set_log_filter(log_filter, config.log.as_deref().or(quiet));
    let outcome = runtime(0)?.block_on(coldwire::cli::run(config, target.database, action));
    if let Err(e) = outcome {
        eprintln!("coldwire: {e:#}");
        std::process::exit(1);
    }
    Ok(())
}

async fn serve(
    args: ServeArgs,
    config: coldwire::config::Config,
    log_filter: LogFilter,
) -> anyhow::Result<()> {
    let shutdown = on_signal()?;
    // Before the proxy announces itself: SIGHUP's default action ends the process.
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let mut log = config.log.clone();
    let server = Server::bind(config).await?;
    if let Some(addr) = server.local_addr() {
        println!("coldwire listening on {addr}");
    }
    if let Some(addr) = server.metrics_addr() {
        println!("coldwire metrics on http://{addr}/metrics");
    }
    let reloader = server.reloader();
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            log = reload(&args, &reloader, &log_filter, log.take());
        }
    });
    server.run(shutdown).await;
    Ok(())
}

/// SIGHUP: reads the configuration again (file, environment, flags) and applies what can
/// change without a restart; on an invalid configuration keeps the running one. Returns
/// the `log` setting now in force.
fn reload(
    args: &ServeArgs,
    reloader: &coldwire::server::Reloader,
    log_filter: &LogFilter,
    log: Option<String>,
) -> Option<String> {
    tracing::info!("SIGHUP received: reloading the configuration");
    let config = match args.resolve() {
        Ok(config) => config,
        Err(e) => {
            tracing::error!(error = %e, "the configuration is invalid; the running one stays");
            return log;
        }
    };
    let mut changed = match reloader.reload(&config) {
        Ok(changed) => changed,
        Err(e) => {
            tracing::error!(error = %e, "cannot apply the configuration; the running one stays");
            return log;
        }
    };
    if config.log != log {
        set_log_filter(log_filter, config.log.as_deref());
        changed.push(format!(
            "log: {}",
            config.log.as_deref().unwrap_or("RUST_LOG or coldwire=info")
        ));
    }
    tracing::info!(changed = %changed.join("; "), "configuration reloaded");
    config.log
}

/// Filters the log by `log` (RUST_LOG directives), or by RUST_LOG without it.
fn set_log_filter(handle: &LogFilter, log: Option<&str>) {
    let filter = match log {
        Some(directives) => tracing_subscriber::EnvFilter::new(directives),
        None => env_filter(),
    };
    if let Err(e) = handle.reload(filter) {
        tracing::warn!(error = %e, "cannot change the log filter");
    }
}

/// A token cancelled by SIGINT or SIGTERM. The handlers are installed before this returns,
/// so a signal that arrives once the proxy announced itself is never lost.
fn on_signal() -> std::io::Result<CancellationToken> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = int.recv() => tracing::info!("SIGINT received"),
            _ = term.recv() => tracing::info!("SIGTERM received"),
        }
        token.cancel();
    });
    Ok(shutdown)
}
