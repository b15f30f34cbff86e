//! Who an HTTP request is from, once it has shown a credential, and what
//! that caller may do (the grants of `--auth`'s policy; `auth.rs` checks
//! them per route).

use super::route_access::Scope;
use crate::auth::{Action, Gate, PrincipalId};

/// Who a request is from, once it has shown a credential.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// The holder of `--http-token`: every action.
    Admin,
    /// A principal of the `--auth` policy, with its grants.
    Principal(PrincipalId),
}

impl Caller {
    /// May it do `action` in `scope` (on `tube`, for a tube or a job)?
    pub fn may(self, gate: Option<&Gate>, action: Action, scope: Scope, tube: &str) -> bool {
        let grants = match (self, gate) {
            (Caller::Admin, _) => return true,
            (Caller::Principal(id), Some(gate)) => &gate.policy().principal(id).grants,
            (Caller::Principal(_), None) => return false,
        };
        match scope {
            Scope::Anyone => true,
            Scope::Somewhere => grants.allows_somewhere(action),
            Scope::Everywhere => grants.allows_everywhere(action),
            Scope::Tube | Scope::Job => grants.allows(action, tube),
        }
    }

    /// Its name in the audit trail.
    pub fn name(self, gate: Option<&Gate>) -> &str {
        match (self, gate) {
            (Caller::Principal(id), Some(gate)) => &gate.policy().principal(id).name,
            _ => "http-token",
        }
    }
}
