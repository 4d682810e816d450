//! `coldwire demo`, the embedded default: a throwaway local Postgres, a local cold folder,
//! and the proxy in front, until Ctrl-C.

pub mod cluster;

use std::path::PathBuf;

use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::server::{Server, ServerError};
use cluster::{ClusterError, ClusterOptions, LocalCluster};

/// Flags of `coldwire demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Directory for the throwaway cluster and cold folder [default: a new temp directory].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Address for the proxy.
    #[arg(long, default_value = "127.0.0.1:6432")]
    pub listen: String,
    /// Address for the Prometheus endpoint.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub metrics_listen: String,
    /// Keep the directory after Ctrl-C.
    #[arg(long)]
    pub keep: bool,
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Server(#[from] ServerError),
}

/// Runs the demo until `shutdown` fires, then stops Postgres and removes its files.
///
/// # Errors
/// No PostgreSQL binaries, a cluster that does not start, or a busy listen address.
pub async fn run(args: DemoArgs, shutdown: CancellationToken) -> Result<(), DemoError> {
    let root = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("coldwire-demo-{}", std::process::id()))
    });
    let opts = ClusterOptions {
        root: root.clone(),
        die_with_parent: true,
        keep: args.keep,
        ..Default::default()
    };
    println!(
        "coldwire demo: starting a throwaway PostgreSQL in {} ...",
        root.display()
    );
    let cluster = LocalCluster::start(&opts)?;
    let config = Config {
        listen: args.listen.clone(),
        upstream: format!("postgres://127.0.0.1:{}/postgres", cluster.port()),
        service_url: Some(cluster.url("postgres")),
        cold_store: format!("file://{}", root.join("cold").display()),
        metrics_listen: Some(args.metrics_listen.clone()),
        ..Config::default()
    };
    let server = Server::bind(config).await?;
    let addr = server
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or(args.listen);
    println!("coldwire listening on {addr}");
    println!();
    println!(
        "  PostgreSQL {} (binaries in {}), port {}",
        pg_version(&cluster),
        cluster.bin_dir().display(),
        cluster.port()
    );
    println!("  cold store  file://{}", root.join("cold").display());
    if let Some(m) = server.metrics_addr() {
        println!("  metrics     http://{m}/metrics");
    }
    println!();
    println!("Connect through coldwire with:");
    println!("  psql \"postgres://postgres@{addr}/postgres\"");
    println!();
    println!(
        "Press Ctrl-C to stop; the cluster and its files are then {}.",
        if args.keep { "kept" } else { "removed" }
    );
    server.run(shutdown).await;
    drop(cluster);
    Ok(())
}

fn pg_version(cluster: &LocalCluster) -> String {
    std::process::Command::new(cluster.bin_dir().join("postgres"))
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.split_whitespace().nth(2).map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}
