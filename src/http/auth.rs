//! Access: with `--http-token`, the admin API, the dashboard (and, with
//! `--http-token-metrics`, `/metrics`) need the token, as a bearer header
//! (`Authorization: Bearer TOKEN`, for scripts and `sprout admin`) or as
//! the cookie `/login` sets (for the dashboard). Health checks stay open.
//!
//! The cookie is `HttpOnly` and `SameSite=Strict`: another site's page
//! cannot send it, and the API's changes take JSON bodies, which a
//! cross-site form cannot post without the browser asking first.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Form, Router};
use serde::Deserialize;

use super::app::App;
use super::error::ApiError;

const COOKIE: &str = "sprout_token";

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
        Some(token) if !allowed(request.headers(), token) => {
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
        Some(token) if !allowed(request.headers(), token) => Redirect::to("/login").into_response(),
        _ => next.run(request).await,
    }
}

/// Whether the request carries `token`, as a bearer header or our cookie.
fn allowed(headers: &HeaderMap, token: &str) -> bool {
    let bearer = headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.strip_prefix("Bearer "))
        .any(|given| same(given.trim().as_bytes(), token.as_bytes()));
    let expected = hex(token.as_bytes());
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .any(|given| same(given.as_bytes(), expected.as_bytes()));
    bearer || cookie
}

/// Equality that takes as long whatever the first differing byte is.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The cookie holds the token in hex, so any token fits a cookie value.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
        _ => {
            let cookie = format!(
                "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
                hex(form.token.as_bytes())
            );
            ([(header::SET_COOKIE, cookie)], Redirect::to("/")).into_response()
        }
    }
}

async fn logout() -> Response {
    let cookie = format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    ([(header::SET_COOKIE, cookie)], Redirect::to("/login")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_accepted_as_bearer_or_cookie_only_when_exact() {
        let token = "s3cret";
        // (header, value, allowed)
        let table = [
            ("authorization", "Bearer s3cret".to_owned(), true),
            ("authorization", "Bearer s3cre".to_owned(), false),
            ("authorization", "Basic s3cret".to_owned(), false),
            ("cookie", format!("a=b; {COOKIE}={}", hex(b"s3cret")), true),
            ("cookie", format!("{COOKIE}=s3cret"), false),
            ("cookie", format!("x{COOKIE}={}", hex(b"s3cret")), false),
        ];
        for (name, value, expected) in table {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::HeaderName::from_static(name),
                value.parse().unwrap(),
            );
            assert_eq!(allowed(&headers, token), expected, "{name}: {value}");
        }
        assert!(!allowed(&HeaderMap::new(), token));
    }
}
