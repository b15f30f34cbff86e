//! What a principal may do: grants, each a set of tube patterns × a set
//! of actions. The four actions are the issue's:
//! - `produce`: `use` a tube, `put` into it;
//! - `consume`: `watch` it, reserve from it, and delete, release, bury,
//!   touch the jobs this connection reserved;
//! - `inspect`: `peek*`, `stats*`, `list-*` (and `use`, to peek);
//! - `admin`: `kick`, `kick-job`, `pause-tube`, `flush-tube`, deleting a
//!   job this connection did not reserve (and `use`, to kick).
//!
//! No action implies another: an operator who may kick but not peek is
//! granted `admin` alone. Grants only add; there is no deny.

use serde::Deserialize;

use super::glob::TubePattern;

/// One of the four actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Produce,
    Consume,
    Inspect,
    Admin,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Produce => "produce",
            Action::Consume => "consume",
            Action::Inspect => "inspect",
            Action::Admin => "admin",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// Some actions on the tubes some patterns match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    tubes: Vec<TubePattern>,
    /// One bit per [`Action`].
    actions: u8,
}

impl Grant {
    pub fn new(tubes: Vec<TubePattern>, actions: &[Action]) -> Grant {
        let actions = actions.iter().fold(0, |set, a| set | a.bit());
        Grant { tubes, actions }
    }

    fn has(&self, action: Action) -> bool {
        self.actions & action.bit() != 0
    }
}

/// A principal's grants.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grants(Vec<Grant>);

impl Grants {
    pub fn new(grants: Vec<Grant>) -> Grants {
        Grants(grants)
    }

    /// May `action` be done on tube `tube`?
    pub fn allows(&self, action: Action, tube: &str) -> bool {
        self.with(action)
            .any(|g| g.tubes.iter().any(|p| p.matches(tube)))
    }

    /// Is `action` granted on some tube at least?
    pub fn allows_somewhere(&self, action: Action) -> bool {
        self.with(action).next().is_some()
    }

    /// Is `action` granted on every tube (a pattern of `*`)?
    pub fn allows_everywhere(&self, action: Action) -> bool {
        self.with(action)
            .any(|g| g.tubes.iter().any(TubePattern::matches_all))
    }

    fn with(&self, action: Action) -> impl Iterator<Item = &Grant> {
        self.0.iter().filter(move |g| g.has(action))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(tubes: &[&str], actions: &[Action]) -> Grant {
        let tubes = tubes.iter().map(|t| TubePattern::new(t).unwrap()).collect();
        Grant::new(tubes, actions)
    }

    #[test]
    fn grants_add_up() {
        use Action::*;
        let grants = Grants::new(vec![
            grant(&["orders.*", "billing"], &[Produce]),
            grant(&["orders.eu"], &[Consume, Inspect]),
        ]);
        for (action, tube, want) in [
            (Produce, "orders.eu", true),
            (Produce, "orders.us", true),
            (Produce, "billing", true),
            (Produce, "default", false),
            (Consume, "orders.eu", true),
            (Consume, "orders.us", false),
            (Inspect, "orders.eu", true),
            (Admin, "orders.eu", false),
        ] {
            assert_eq!(grants.allows(action, tube), want, "{action:?} {tube}");
        }
        assert!(grants.allows_somewhere(Inspect));
        assert!(!grants.allows_somewhere(Admin));
        assert!(!grants.allows_everywhere(Inspect));
        let ops = Grants::new(vec![grant(&["*"], &[Inspect, Admin])]);
        assert!(ops.allows_everywhere(Inspect) && ops.allows_everywhere(Admin));
        assert!(!ops.allows_everywhere(Produce));
        assert!(!Grants::default().allows_somewhere(Produce));
    }
}
