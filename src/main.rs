//! The `coldwire` command: `serve` runs the proxy, `demo` runs it on a throwaway Postgres.

use anyhow::Context;
use clap::{Parser, Subcommand};
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
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "coldwire=info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            let config = args.resolve().context("configuration")?;
            runtime(config.worker_threads)?.block_on(serve(config))
        }
        Command::Demo(args) => runtime(0)?.block_on(async {
            let shutdown = on_signal()?;
            Ok(coldwire::demo::run(args, shutdown).await?)
        }),
    }
}

async fn serve(config: coldwire::config::Config) -> anyhow::Result<()> {
    let shutdown = on_signal()?;
    let server = Server::bind(config).await?;
    if let Some(addr) = server.local_addr() {
        println!("coldwire listening on {addr}");
    }
    if let Some(addr) = server.metrics_addr() {
        println!("coldwire metrics on http://{addr}/metrics");
    }
    server.run(shutdown).await;
    Ok(())
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
