//! The floor of a relay, for `bench/passthrough`: accepts TCP connections and copies
//! bytes both ways to a Postgres Unix socket with `tokio::io::copy_bidirectional`, one
//! task per connection, nothing parsed. Whatever a proxy does on top of moving bytes,
//! it cannot be faster than this on the same machine; the benchmark runs it side by side
//! with coldwire so that coldwire's ratio to direct can be read against it.
//!
//! Usage: `bare_relay LISTEN_ADDR UNIX_SOCKET_PATH [WORKER_THREADS]`: the same runtime as
//! `coldwire serve --worker-threads N` (0 or absent: one worker per core; 1: one thread).

use tokio::net::{TcpListener, UnixStream};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(socket)) = (args.next(), args.next()) else {
        eprintln!("usage: bare_relay LISTEN_ADDR UNIX_SOCKET_PATH [WORKER_THREADS]");
        std::process::exit(2);
    };
    let threads: usize = match args.next().map(|t| t.parse()) {
        None => 0,
        Some(Ok(t)) => t,
        Some(Err(e)) => {
            eprintln!("bare_relay: WORKER_THREADS: {e}");
            std::process::exit(2);
        }
    };
    coldwire::server::runtime(threads)?.block_on(async move {
        let listener = TcpListener::bind(&listen).await?;
        println!("bare_relay listening on {}", listener.local_addr()?);
        loop {
            let (mut client, _) = listener.accept().await?;
            client.set_nodelay(true)?;
            let socket = socket.clone();
            tokio::spawn(async move {
                match UnixStream::connect(&socket).await {
                    Ok(mut upstream) => {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                    Err(e) => eprintln!("bare_relay: {socket}: {e}"),
                }
            });
        }
    })
}
