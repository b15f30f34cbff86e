//! Access: with `--http-token`, the admin API, the dashboard (and, with
//! `--http-token-metrics`, `/metrics`) need the token, as a bearer header
//! (`Authorization: Bearer TOKEN`, for scripts and `sprout admin`) or a
//! session the dashboard's `/login` started (its cookie holds a random
//! session id, never the token: `session.rs`). Health checks stay open.
//!
//! The cookie is `HttpOnly` and `SameSite=Strict`: another site's page
//! cannot send it, and the API's changes take JSON bodies, which a
//! cross-site form cannot post without the browser asking first.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Form, Router};
use serde::Deserialize;

use super::app::App;
use super::error::ApiError;
use super::session::SessionId;

/// Who a request is from, once it has shown a credential.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// The holder of `--http-token`: every action.
    Admin,
}

const COOKIE: &str = "sprout_session";

/// `router` with the token required (when one is set and `required`).
pub fn guard(router: Router<Arc<App>>, app: &Arc<App>, required: bool) -> Router<Arc<App>> {
    if app.token.is_none() || !required {
        return router;
    }
    router.route_layer(middleware::from_fn_with_state(app.clone(), api_gate))
}

/// Like [`guard`], for pages: without the token, the login page.
pub fn guard_page(router: Router<Arc<App>>, app: &Arc<App>) -> Router<Arc<App>> {
    if app.token.is_none() {
        return router;
    }
    router.route_layer(middleware::from_fn_with_state(app.clone(), page_gate))
}

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/login", get(login_page).post(login))
        .route("/logout", axum::routing::post(logout))
}

async fn api_gate(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    match app.token.as_deref() {
        Some(token) if !allowed(&app, request.headers(), token) => {
            let mut response = ApiError::new(
                StatusCode::UNAUTHORIZED,
                "a valid token is needed (Authorization: Bearer TOKEN)",
            )
            .into_response();
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, "Bearer".parse().expect("valid"));
            response
        }
        _ => next.run(request).await,
    }
}

async fn page_gate(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    match app.token.as_deref() {
        Some(token) if !allowed(&app, request.headers(), token) => {
            Redirect::to("/login").into_response()
        }
        _ => next.run(request).await,
    }
}

/// Whether the request carries `token` as a bearer header, or the cookie
/// of a live session.
fn allowed(app: &App, headers: &HeaderMap, token: &str) -> bool {
    let bearer = headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.strip_prefix("Bearer "))
        .any(|given| same(given.trim().as_bytes(), token.as_bytes()));
    let now = Instant::now();
    bearer || session_ids(headers).any(|id| app.sessions.find(id, now).is_some())
}

/// The session ids the request's cookies name.
fn session_ids(headers: &HeaderMap) -> impl Iterator<Item = SessionId> + '_ {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .filter_map(SessionId::parse)
}

/// Equality that takes as long whatever the first differing byte is.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn login_page() -> Html<&'static str> {
    Html(include_str!("assets/login.html"))
}

#[derive(Deserialize)]
struct Login {
    token: String,
}

async fn login(State(app): State<Arc<App>>, Form(form): Form<Login>) -> Response {
    match app.token.as_deref() {
        Some(token) if !same(form.token.as_bytes(), token.as_bytes()) => (
            StatusCode::UNAUTHORIZED,
            Html(include_str!("assets/login.html")),
        )
            .into_response(),
        // Nothing to sign in to.
        None => Redirect::to("/").into_response(),
        Some(_) => {
            let id = app.sessions.start(Caller::Admin, Instant::now());
            let cookie = format!(
                "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
                id.to_hex()
            );
            ([(header::SET_COOKIE, cookie)], Redirect::to("/")).into_response()
        }
    }
}

/// Ends the session the cookie names, on the server too.
async fn logout(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    for id in session_ids(&headers) {
        app.sessions.end(id);
    }
    let cookie = format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    ([(header::SET_COOKIE, cookie)], Redirect::to("/login")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_accepted_as_bearer_or_a_live_session_only_when_exact() {
        let token = "s3cret";
        let app = App::new(Some(token.into()), false);
        let live = app.sessions.start(Caller::Admin, Instant::now()).to_hex();
        let ended = app.sessions.start(Caller::Admin, Instant::now());
        app.sessions.end(ended);
        // (header, value, allowed)
        let table = [
            ("authorization", "Bearer s3cret".to_owned(), true),
            ("authorization", "Bearer s3cre".to_owned(), false),
            ("authorization", "Basic s3cret".to_owned(), false),
            ("cookie", format!("a=b; {COOKIE}={live}"), true),
            ("cookie", format!("{COOKIE}={}", ended.to_hex()), false),
            ("cookie", format!("{COOKIE}=s3cret"), false),
            ("cookie", format!("{COOKIE}={}", "0".repeat(64)), false),
            ("cookie", format!("x{COOKIE}={live}"), false),
        ];
        for (name, value, expected) in table {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::HeaderName::from_static(name),
                value.parse().unwrap(),
            );
            assert_eq!(allowed(&app, &headers, token), expected, "{name}: {value}");
        }
        assert!(!allowed(&app, &HeaderMap::new(), token));
    }
}
