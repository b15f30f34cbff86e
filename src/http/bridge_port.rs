//! `sprout bridge --metrics ADDR`: a standalone bridge's `/metrics`, the
//! bridge's families of the server's own scrape (`metrics.rs`), served
//! without the server around them.

use std::io;
use std::net::SocketAddr;

use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use crate::bridge;

use super::error::ApiError;
use super::metrics::{encoded, BridgeFigures};

/// Binds `addr` (HOST:PORT) and serves `status`' figures on `/metrics`
/// there, in a task of its own; returns the address bound.
pub async fn serve_bridge_metrics(addr: &str, status: bridge::Status) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tracing::info!(target: crate::STATUS, "bridge metrics on http://{bound}/metrics");
    let router = Router::new()
        .route("/metrics", get(scrape))
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .with_state(status);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!(error = %e, "the bridge's metrics port stopped");
        }
    });
    Ok(bound)
}

async fn scrape(State(status): State<bridge::Status>) -> Result<Response, ApiError> {
    encoded(BridgeFigures {
        keys: status.keys(),
        timers_pending: None,
        punctuality: status.punctuality(),
    })
}
