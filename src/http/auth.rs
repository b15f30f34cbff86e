//! Access to the HTTP port. With `--http-token` or `--auth`, the admin
//! API and the dashboard (and `/metrics`: with `--auth` always, with
//! `--http-token` when `--http-token-metrics` says so) need a credential:
//! a bearer header (`Authorization: Bearer TOKEN`, for scripts and
//! `sprout admin`) or a session the dashboard's `/login` started (its
//! cookie holds a random session id, never the token: `sign_in.rs`).
//! Health checks stay open.
//!
//! A token is `--http-token` (every action), or a principal's token from
//! the `--auth` policy, with that principal's grants: `route_access.rs` says
//! what each route needs, and a caller without it gets 403 (a read-only
//! principal sees the dashboard, and its buttons are refused). Wrong
//! tokens count against the address as they do on the beanstalk port
//! (`auth/limit.rs`), and sign-ins, refusals and every change made
//! through the port go to the audit trail (`auth/audit.rs`).
//!
//! The cookie is `HttpOnly` and `SameSite=Strict` (and `Secure` over
//! TLS): another site's page cannot send it, and the API's changes take
//! JSON bodies, which a cross-site form cannot post without the browser
//! asking first.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, MatchedPath, RawPathParams, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Form, Router};
use serde::Deserialize;

use super::app::App;
use super::caller::Caller;
use super::client_addr::ClientAddr;
use super::error::ApiError;
use super::route_access::{self, Scope};
use super::sign_in::SessionId;
use crate::auth::{audit, Action, Gate};
use crate::peer::Peer;

/// Whether the request's `caller` (None on an open port) may do `action`
/// on `tube`: for handlers whose need goes past their route's (the tubes
/// a list shows, the tube a move goes to).
pub fn may(app: &App, caller: Option<Caller>, action: Action, tube: &str) -> bool {
    caller.is_none_or(|c| c.may(gate(app), action, Scope::Tube, tube))
}

const COOKIE: &str = "sprout_session";

/// `router` behind the credential check (when `--http-token` or
/// `--auth` asks for one); `always`: also with only `--http-token`.
pub fn guard(router: Router<Arc<App>>, app: &Arc<App>, always: bool) -> Router<Arc<App>> {
    if !always && !app.auth {
        return router;
    }
    router.route_layer(middleware::from_fn_with_state(app.clone(), api_gate))
}

/// Like [`guard`], for pages: without a credential, the login page.
pub fn guard_page(router: Router<Arc<App>>, app: &Arc<App>) -> Router<Arc<App>> {
    router.route_layer(middleware::from_fn_with_state(app.clone(), page_gate))
}

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/login", get(login_page).post(login))
        .route("/logout", axum::routing::post(logout))
}

/// Whether this port asks for credentials at all.
fn guarded(app: &App) -> bool {
    app.token.is_some() || app.auth
}

/// The access gate of `--auth`, once the server serves.
fn gate(app: &App) -> Option<&Gate> {
    app.server().ok()?.auth().map(|g| &**g)
}

async fn api_gate(
    State(app): State<Arc<App>>,
    ConnectInfo(ClientAddr(from)): ConnectInfo<ClientAddr>,
    mut request: Request,
    next: Next,
) -> Response {
    if !guarded(&app) {
        return next.run(request).await;
    }
    let caller = match identify(&app, request.headers(), from) {
        Some(caller) => caller,
        None => return unauthorized(),
    };
    let gate = gate(&app);
    let shown = format!("{} {}", request.method(), request.uri().path());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let need = route_access::need(request.method(), route.as_deref().unwrap_or(""));
    let tube = target_tube(&app, &mut request, need.scope).await;
    let allowed = match &tube {
        Some(tube) => caller.may(gate, need.action, need.scope, tube),
        // A job that does not exist: the handler's 404 tells no more.
        None => need.scope == Scope::Job || caller.may(gate, need.action, need.scope, ""),
    };
    let peer = http_peer(from);
    let actor = audit::Actor {
        principal: caller.name(gate),
        peer: &peer,
    };
    if !allowed {
        audit::http(&actor, &shown, "forbidden");
        let on = tube.map_or_else(
            || format!("{:?}", need.scope).to_lowercase(),
            |t| format!("tube {t}"),
        );
        let message = format!("forbidden: this needs {} on {on}", need.action.name());
        return ApiError::new(StatusCode::FORBIDDEN, message).into_response();
    }
    let changes = !matches!(*request.method(), Method::GET | Method::HEAD);
    request.extensions_mut().insert(caller);
    let response = next.run(request).await;
    if changes {
        audit::http(&actor, &shown, response.status().as_str());
    }
    response
}

/// The tube a route's need applies to: its `{tube}`, or the tube of its
/// `{id}` job (None if there is no such job, or the scope names none).
async fn target_tube(app: &App, request: &mut Request, scope: Scope) -> Option<String> {
    use axum::extract::FromRequestParts;
    let (mut parts, body) = std::mem::take(request).into_parts();
    let params = RawPathParams::from_request_parts(&mut parts, &())
        .await
        .ok();
    *request = Request::from_parts(parts, body);
    let param = |name: &str| {
        params
            .as_ref()?
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.to_owned())
    };
    match scope {
        Scope::Tube => param("tube"),
        Scope::Job => {
            let id = param("id")?.parse().ok()?;
            let info = app.read(|engine, now| engine.job_info(id, now)).ok()??;
            Some(info.tube.as_str().to_owned())
        }
        _ => None,
    }
}

fn unauthorized() -> Response {
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

async fn page_gate(
    State(app): State<Arc<App>>,
    ConnectInfo(ClientAddr(from)): ConnectInfo<ClientAddr>,
    request: Request,
    next: Next,
) -> Response {
    if guarded(&app) && identify(&app, request.headers(), from).is_none() {
        return Redirect::to("/login").into_response();
    }
    next.run(request).await
}

/// Who the request is from: its bearer token's holder, or its session's.
/// A bearer token that is wrong makes it nobody, whatever its cookie.
fn identify(app: &App, headers: &HeaderMap, from: SocketAddr) -> Option<Caller> {
    let bearer = headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("Bearer "));
    if let Some(token) = bearer {
        return by_token(app, token.trim().as_bytes(), from);
    }
    let now = Instant::now();
    session_ids(headers).find_map(|id| app.sessions.find(id, now))
}

/// Whose token `token` is: `--http-token`'s holder, or a principal's
/// (unless its address failed too often lately).
fn by_token(app: &App, token: &[u8], from: SocketAddr) -> Option<Caller> {
    if let Some(admin) = &app.token {
        if same(token, admin.as_bytes()) {
            return Some(Caller::Admin);
        }
    }
    let gate = gate(app)?;
    let checked = gate.check(token, &from.ip().to_string(), Instant::now());
    let caller = checked.ok().flatten().map(Caller::Principal);
    if caller.is_none() {
        let peer = http_peer(from);
        let actor = audit::Actor {
            principal: "unauthenticated",
            peer: &peer,
        };
        audit::auth(&actor, "unauthorized");
    }
    caller
}

/// An HTTP client, as the audit trail names it.
fn http_peer(from: SocketAddr) -> Peer {
    Peer {
        addr: from.to_string(),
        listener: "http".into(),
        cert: None,
        vouched: None,
    }
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

async fn login(
    State(app): State<Arc<App>>,
    ConnectInfo(ClientAddr(from)): ConnectInfo<ClientAddr>,
    Form(form): Form<Login>,
) -> Response {
    if !guarded(&app) {
        // Nothing to sign in to.
        return Redirect::to("/").into_response();
    }
    match by_token(&app, form.token.as_bytes(), from) {
        None => (
            StatusCode::UNAUTHORIZED,
            Html(include_str!("assets/login.html")),
        )
            .into_response(),
        Some(caller) => {
            // A sign-in is audited (a bearer token, per request, only
            // where it changes something or is refused).
            let peer = http_peer(from);
            let actor = audit::Actor {
                principal: caller.name(gate(&app)),
                peer: &peer,
            };
            audit::auth(&actor, "authenticated");
            let id = app.sessions.start(caller, Instant::now());
            let secure = if app.tls { "; Secure" } else { "" };
            let cookie = format!(
                "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict{secure}",
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
        let app = App::new(Some("s3cret".into()), false);
        let live = app.sessions.start(Caller::Admin, Instant::now()).to_hex();
        let ended = app.sessions.start(Caller::Admin, Instant::now());
        app.sessions.end(ended);
        let from: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        // (header, value, caller)
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
            let caller = identify(&app, &headers, from);
            assert_eq!(caller.is_some(), expected, "{name}: {value}");
        }
        assert_eq!(identify(&app, &HeaderMap::new(), from), None);
    }
}
