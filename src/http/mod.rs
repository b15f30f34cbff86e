//! The HTTP side port (`--http ADDR:PORT`): Prometheus metrics, health
//! checks, a JSON admin API and a web dashboard, on the server's own tokio
//! runtime (axum over hyper).
//!
//! How, file by file:
//! * `http_flags`: the `--http*` flags.
//! * `app`: what handlers share, and `app::App::change`, the one way
//!   they change the queue (through the engine and the store, like a
//!   protocol command).
//! * `health`: `/healthz`, `/readyz`.
//! * `metrics`: `/metrics`, from one engine snapshot per scrape.
//! * `api`: `/api/…`, the admin calls; `batch`: flush and move, a
//!   batch per lock.
//! * `auth`: who a request is from (`--http-token`, or a principal of
//!   `--auth`; a bearer header, or a session the dashboard's login
//!   started) and whether it may (`caller`: the caller and its grants);
//!   `route_access`: what each route needs;
//!   `sign_in`: the sign-ins, kept on the server.
//! * `tls_accept`: `--http-tls`, handshakes in their own tasks.
//! * `dashboard`: the page at `/`, its assets compiled into the binary.
//! * `history`: the last ten minutes of figures, for the charts.
//!
//! The port is bound before the store is recovered, so `/healthz` answers
//! at once and `/readyz` says 503 until the server serves. The beanstalk
//! port shares nothing with it but the engine lock, which every call here
//! holds as briefly as a command does.

use std::future::IntoFuture;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use sprout_protocol::TubeName;
use tokio::net::TcpListener;

use crate::bridge;
use crate::shared::Shared;

mod api;
mod app;
mod auth;
mod batch;
mod bridge_port;
mod bridge_timers;
mod caller;
mod client_addr;
mod dashboard;
mod error;
mod extract;
mod figures;
mod health;
mod history;
pub(crate) mod http_flags;
mod metrics;
mod route_access;
mod sign_in;
mod tls_accept;

use app::App;
pub use bridge_port::serve_bridge_metrics;
use client_addr::ClientAddr;
pub use http_flags::{HttpArgs, Options};
pub use tls_accept::HttpTls;
use tls_accept::TlsListener;

/// A bound, serving HTTP port, waiting for the server to attach.
pub struct Port {
    app: Arc<App>,
    addr: SocketAddr,
}

impl Port {
    /// Binds `options`' address and starts serving (health checks at once,
    /// the rest once [`Port::attach`] is called). `max_job_size` bounds the
    /// bodies of puts.
    /// `store` is `-b DIR`, whose size on disk `/metrics` reports.
    /// `tls`: with `--http-tls`, the certificate and the handshake cap.
    pub async fn bind(
        options: &Options,
        max_job_size: u32,
        store: Option<PathBuf>,
        tls: Option<HttpTls>,
    ) -> io::Result<Port> {
        let listener = TcpListener::bind((options.host.as_str(), options.port)).await?;
        let addr = listener.local_addr()?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        tracing::info!(target: crate::STATUS, "HTTP API and dashboard on {scheme}://{addr}");
        let mut app = App::new(options.token.clone(), options.token_metrics);
        app.auth = options.auth;
        app.tls = tls.is_some();
        app.store_dir = store;
        let app = Arc::new(app);
        let router = router(app.clone(), max_job_size);
        let service = router.into_make_service_with_connect_info::<ClientAddr>();
        let served = match tls {
            None => tokio::spawn(axum::serve(listener, service).into_future()),
            Some(tls) => {
                let listener = TlsListener::spawn(listener, tls)?;
                tokio::spawn(axum::serve(listener, service).into_future())
            }
        };
        tokio::spawn(async move {
            if let Ok(Err(e)) = served.await {
                tracing::error!(error = %e, "the HTTP port stopped");
            }
        });
        Ok(Port { app, addr })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The embedded Redis bridge runs, delivering to `tube` with timers in
    /// `timers`: show it.
    pub fn show_bridge(&self, tube: &TubeName, timers: &TubeName, status: bridge::Status) {
        self.app.show_bridge(app::Bridge {
            tube: tube.clone(),
            timers: timers.clone(),
            status,
        });
    }

    /// The server has recovered: serve it.
    pub fn attach(&self, shared: Arc<Shared>) {
        self.app.attach(shared.clone());
        tokio::spawn(history::sample(self.app.history.clone(), shared));
    }
}

fn router(app: Arc<App>, max_job_size: u32) -> Router {
    let open = Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz));
    let metrics = auth::guard(
        Router::new().route("/metrics", get(metrics::metrics)),
        &app,
        app.token_metrics && app.token.is_some(),
    );
    let api = auth::guard(api::routes(max_job_size), &app, true);
    let dashboard = auth::guard_page(dashboard::page(), &app);
    open.merge(metrics)
        .merge(api)
        .merge(dashboard)
        .merge(dashboard::assets())
        .merge(auth::routes())
        .fallback(|| async { error::ApiError::not_found("no such endpoint") })
        .with_state(app)
}
