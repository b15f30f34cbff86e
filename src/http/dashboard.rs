//! The web dashboard: one hand-written page (HTML, CSS, a script without
//! dependencies), compiled into the binary and served from memory: nothing
//! is fetched from elsewhere, so it works on an isolated network.
//!
//! The page reads only the admin API (`/api/…`), polling it every second;
//! every list it shows is a page of at most 50 jobs, so a tube of a
//! million jobs costs it no more than one of ten.

use std::sync::Arc;

use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use axum::Router;

use super::app::App;

/// The page (behind the token, when one is set).
pub fn page() -> Router<Arc<App>> {
    Router::new().route(
        "/",
        get(|| async { Html(include_str!("assets/index.html")) }),
    )
}

/// Its script and style sheet (open: they hold no data, and the login page
/// uses the style sheet).
pub fn assets() -> Router<Arc<App>> {
    Router::new()
        .route(
            "/assets/app.js",
            get(|| async { asset("text/javascript", include_str!("assets/app.js")) }),
        )
        .route(
            "/assets/style.css",
            get(|| async { asset("text/css", include_str!("assets/style.css")) }),
        )
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}
