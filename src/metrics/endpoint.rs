//! A deliberately tiny HTTP/1.1 server for `GET /metrics`: one request per connection,
//! no keep-alive, so the relay does not carry an HTTP stack.

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Requests larger than this are not metrics scrapes.
const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// A scraper that sends nothing for this long is dropped.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `/metrics` (Prometheus text format) and `/healthz` until `shutdown` fires.
pub async fn serve(listener: TcpListener, handle: PrometheusHandle, shutdown: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                let handle = handle.clone();
                tokio::spawn(async move {
                    if let Err(e) =
                        tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &handle)).await
                    {
                        tracing::debug!(error = %e, "metrics request timed out");
                    }
                });
            }
            Err(e) => tracing::warn!(error = %e, "metrics accept failed"),
        }
    }
}

async fn answer(mut stream: TcpStream, handle: &PrometheusHandle) {
    let mut request = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&chunk[..n]),
        }
        if request.len() > MAX_REQUEST_BYTES {
            return;
        }
    }
    let line = request.split(|&b| b == b'\r').next().unwrap_or_default();
    let (status, content_type, body) = match line {
        l if l.starts_with(b"GET /metrics ") => {
            ("200 OK", "text/plain; version=0.0.4", handle.render())
        }
        l if l.starts_with(b"GET /healthz ") => ("200 OK", "text/plain", "ok\n".to_owned()),
        l if l.starts_with(b"GET ") => ("404 Not Found", "text/plain", "try /metrics\n".to_owned()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_owned(),
        ),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}
