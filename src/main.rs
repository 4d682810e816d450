//! The `coldwire` command: `serve` runs the proxy, `demo` runs it on a throwaway Postgres.

use anyhow::Context;
use clap::{Parser, Subcommand};
use coldwire::config::ServeArgs;
use coldwire::demo::DemoArgs;
use coldwire::server::Server;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(name = "coldwire", version, about = "A Postgres proxy that gives ordinary tables a cold tier")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy.
    Serve(ServeArgs),
    /// Run the proxy in front of a throwaway local Postgres (needs PostgreSQL binaries).
    Demo(DemoArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "coldwire=info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let shutdown = CancellationToken::new();
    tokio::spawn(on_signal(shutdown.clone()));
    match cli.command {
        Command::Serve(args) => {
            let config = args.resolve().context("configuration")?;
            let server = Server::bind(config).await?;
            if let Some(addr) = server.local_addr() {
                println!("coldwire listening on {addr}");
            }
            if let Some(addr) = server.metrics_addr() {
                println!("coldwire metrics on http://{addr}/metrics");
            }
            server.run(shutdown).await;
        }
        Command::Demo(args) => coldwire::demo::run(args, shutdown).await?,
    }
    Ok(())
}

/// SIGINT or SIGTERM starts a graceful shutdown.
async fn on_signal(shutdown: CancellationToken) {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
        tracing::error!("cannot install the SIGTERM handler");
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
        _ = term.recv() => tracing::info!("SIGTERM received"),
    }
    shutdown.cancel();
}
