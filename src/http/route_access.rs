//! What each guarded HTTP route needs of its caller: one of the policy's
//! four actions (`auth/grant.rs`), on the tube the route names, on the
//! tube of the job it names, on some tube or on every tube. The HTTP
//! twin of `auth/verdict.rs`: reads are `inspect`, a put is `produce`,
//! every other change is `admin`, as the issue has every HTTP admin
//! action need `admin`.
//!
//! Server-wide figures (`/api/server`, `/api/history`, `/metrics`) count
//! every tube's jobs, so they need `inspect` on every tube; the tube list
//! needs it on some tube and shows only those (`api.rs`), as does the
//! cluster's membership (`/api/cluster`: no tube's figures in it). The dashboard
//! page itself needs only a signed-in caller: what it then shows is what
//! the API lets that caller read, and its buttons answer 403 where the
//! caller may not act.

use axum::http::Method;

use crate::auth::Action;

/// Where a route's action applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Any signed-in caller (the dashboard page).
    Anyone,
    /// Some tube at least (a list filtered to what the caller may see).
    Somewhere,
    /// Every tube (a pattern of `*`).
    Everywhere,
    /// The tube in the route's `{tube}`.
    Tube,
    /// The tube of the job in the route's `{id}`.
    Job,
}

/// One route's need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    pub action: Action,
    pub scope: Scope,
}

/// What `method` on `route` (the router's pattern, e.g.
/// `/api/tubes/{tube}/kick`) needs. A guarded route not in the table
/// needs `admin` everywhere: a new route is closed until it is listed.
pub fn need(method: &Method, route: &str) -> Need {
    use Action::*;
    use Scope::*;
    let get = method == Method::GET || method == Method::HEAD;
    let (action, scope) = match (get, route) {
        (true, "/") => (Inspect, Anyone),
        (true, "/metrics" | "/api/server" | "/api/history") => (Inspect, Everywhere),
        (true, "/api/tubes" | "/api/cluster") => (Inspect, Somewhere),
        (true, "/api/tubes/{tube}" | "/api/tubes/{tube}/jobs") => (Inspect, Tube),
        (false, "/api/tubes/{tube}/jobs") if method == Method::POST => (Produce, Tube),
        (true, "/api/jobs/{id}" | "/api/jobs/{id}/body") => (Inspect, Job),
        (false, "/api/jobs/{id}") if method == Method::DELETE => (Admin, Job),
        (false, "/api/jobs/{id}/kick" | "/api/jobs/{id}/release-hold") => (Admin, Job),
        (false, route) if route.starts_with("/api/tubes/{tube}/") => (Admin, Tube),
        _ => (Admin, Everywhere),
    };
    Need { action, scope }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Action::*;
    use Scope::*;

    #[test]
    fn every_route_of_the_api_and_pages() {
        let table = [
            (Method::GET, "/", Inspect, Anyone),
            (Method::GET, "/metrics", Inspect, Everywhere),
            (Method::GET, "/api/server", Inspect, Everywhere),
            (Method::GET, "/api/history", Inspect, Everywhere),
            (Method::GET, "/api/tubes", Inspect, Somewhere),
            (Method::GET, "/api/cluster", Inspect, Somewhere),
            (Method::GET, "/api/tubes/{tube}", Inspect, Tube),
            (Method::GET, "/api/tubes/{tube}/jobs", Inspect, Tube),
            (Method::HEAD, "/api/tubes/{tube}/jobs", Inspect, Tube),
            (Method::POST, "/api/tubes/{tube}/jobs", Produce, Tube),
            (Method::POST, "/api/tubes/{tube}/kick", Admin, Tube),
            (Method::POST, "/api/tubes/{tube}/flush", Admin, Tube),
            (Method::POST, "/api/tubes/{tube}/move", Admin, Tube),
            (Method::POST, "/api/tubes/{tube}/pause", Admin, Tube),
            (Method::POST, "/api/tubes/{tube}/resume", Admin, Tube),
            (Method::GET, "/api/jobs/{id}", Inspect, Job),
            (Method::GET, "/api/jobs/{id}/body", Inspect, Job),
            (Method::DELETE, "/api/jobs/{id}", Admin, Job),
            (Method::POST, "/api/jobs/{id}/kick", Admin, Job),
            (Method::POST, "/api/jobs/{id}/release-hold", Admin, Job),
            // Not listed: closed.
            (Method::POST, "/api/server", Admin, Everywhere),
            (Method::PUT, "/api/jobs/{id}", Admin, Everywhere),
            (Method::GET, "/api/new-thing", Admin, Everywhere),
        ];
        for (method, route, action, scope) in table {
            assert_eq!(
                need(&method, route),
                Need { action, scope },
                "{method} {route}"
            );
        }
    }
}
