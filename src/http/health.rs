//! `/healthz` (the process answers) and `/readyz` (it has recovered and
//! takes jobs), for load balancers, systemd and Kubernetes probes.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::app::App;

/// Alive: answers as soon as the port is bound, recovery or not.
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "alive" }))
}

/// Ready: 200 once recovered and serving; 503 while recovering, in drain
/// mode (SIGUSR1), or while the store refuses writes.
pub async fn readyz(State(app): State<Arc<App>>) -> (StatusCode, Json<Value>) {
    let reason = match app.server() {
        Err(_) => Some("recovering"),
        Ok(shared) if !shared.store.healthy() => Some("the store is refusing writes"),
        Ok(shared) if shared.lock().engine.draining() => Some("draining"),
        Ok(_) => None,
    };
    match reason {
        None => (StatusCode::OK, Json(json!({ "status": "ready" }))),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "unready", "reason": reason })),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn not_ready_until_the_server_is_attached() {
        let app = Arc::new(App::new(None, false));
        let (status, Json(body)) = readyz(State(app)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["reason"], "recovering");
    }
}
