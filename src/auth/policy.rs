//! The `--auth` policy file (TOML): its principals, their credentials and
//! grants, and the principal each listener gives a connection that shows
//! no credential.
//!
//! ```toml
//! [[principal]]
//! name = "orders-producer"
//! tokens = ["sha256:<hex of SHA-256(token)>"]   # `sprout hash-token`
//! certs = ["CN=producer-1", "DNS:producer.internal"]
//! grants = [{ tubes = ["orders.*"], actions = ["produce"] }]
//!
//! [listeners]
//! "unix:/run/sprout/sprout.sock" = "ops"
//! ```
//!
//! Loading checks everything it can, and an error names the file, the
//! line and column, and what is wrong: an unknown key or action, a token
//! not in `sha256:<64 hex>` form, a tube pattern no tube can match, a
//! listener not spelled as bound (`ADDR:PORT` or `unix:PATH`) or naming
//! an unknown principal, two principals with one name, one token or one
//! certificate name, a principal nothing can act as (no token, no cert,
//! no listener), a name the metrics reserve. A server never starts on a
//! policy it half understands.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::cert::CertName;
use super::glob::TubePattern;
use super::grant::{Action, Grant, Grants};
use super::token::TokenHash;
use crate::peer::CertIdentity;

/// Names the metrics use for connections without a principal of the
/// policy; no principal may take them.
pub const RESERVED_NAMES: [&str; 2] = ["unauthenticated", "local"];

/// The longest principal name (it labels metrics and log lines).
const MAX_NAME_LEN: usize = 64;

/// A principal's place in its policy.
pub type PrincipalId = usize;

/// A loaded policy.
#[derive(Debug)]
pub struct Policy {
    principals: Vec<Principal>,
    tokens: HashMap<TokenHash, PrincipalId>,
    certs: HashMap<CertName, PrincipalId>,
    /// By the listener's address as bound (`SocketAddr`'s spelling).
    listeners: HashMap<String, PrincipalId>,
}

/// Someone the policy knows, and what they may do.
#[derive(Debug)]
pub struct Principal {
    pub name: String,
    pub grants: Grants,
}

/// What a certificate maps to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByCert {
    None,
    One(PrincipalId),
    /// Its names belong to different principals: it is none of them.
    Ambiguous,
}

impl Policy {
    /// Reads and checks the policy in `path`.
    pub fn load(path: &Path) -> Result<Policy, LoadError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| LoadError {
            file: file.clone(),
            at: None,
            message: format!("cannot read it: {e}"),
        })?;
        Policy::parse(&text, &file)
    }

    /// Checks the policy `text` (from `file`, for errors).
    pub fn parse(text: &str, file: &str) -> Result<Policy, LoadError> {
        let error = |span: Option<Range<usize>>, message: String| LoadError {
            file: file.to_owned(),
            at: span.map(|s| line_and_column(text, s.start)),
            message,
        };
        let raw: RawPolicy =
            toml::from_str(text).map_err(|e| error(e.span(), e.message().into()))?;
        build(raw).map_err(|(span, message)| error(Some(span), message))
    }

    pub fn principal(&self, id: PrincipalId) -> &Principal {
        &self.principals[id]
    }

    /// Every principal's name, in the file's order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.principals.iter().map(|p| p.name.as_str())
    }

    /// The principal named `name`.
    pub fn by_name(&self, name: &str) -> Option<PrincipalId> {
        self.principals.iter().position(|p| p.name == name)
    }

    /// Whose token `token` is.
    pub fn by_token(&self, token: &[u8]) -> Option<PrincipalId> {
        self.tokens.get(&TokenHash::of(token)).copied()
    }

    /// Whose certificate `cert` is.
    pub fn by_cert(&self, cert: &CertIdentity) -> ByCert {
        let mut found = ByCert::None;
        for id in CertName::all_of(cert).filter_map(|n| self.certs.get(&n).copied()) {
            found = match found {
                ByCert::None => ByCert::One(id),
                ByCert::One(first) if first == id => found,
                _ => return ByCert::Ambiguous,
            };
        }
        found
    }

    /// The principal of a connection that shows no credential on
    /// `listener` (spelled as `Peer.listener` spells it).
    pub fn for_listener(&self, listener: &str) -> Option<PrincipalId> {
        self.listeners.get(listener).copied()
    }

    /// The listeners the policy names, as bound.
    pub fn listeners(&self) -> impl Iterator<Item = &str> {
        self.listeners.keys().map(String::as_str)
    }
}

/// Why a policy was refused: where, and what is wrong.
#[derive(Debug, PartialEq, Eq)]
pub struct LoadError {
    pub file: String,
    /// Line and column, from 1.
    pub at: Option<(usize, usize)>,
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some((line, column)) => {
                write!(f, "{}:{line}:{column}: {}", self.file, self.message)
            }
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for LoadError {}

fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |at| at + 1) + 1;
    (line, column)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    principal: Vec<RawPrincipal>,
    #[serde(default)]
    listeners: BTreeMap<Spanned<String>, Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrincipal {
    name: Spanned<String>,
    #[serde(default)]
    tokens: Vec<Spanned<String>>,
    #[serde(default)]
    certs: Vec<Spanned<String>>,
    #[serde(default)]
    grants: Vec<Spanned<RawGrant>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    tubes: Vec<Spanned<String>>,
    actions: Vec<Action>,
}

/// A refusal: where in the text, and why.
type Refusal = (Range<usize>, String);

fn build(raw: RawPolicy) -> Result<Policy, Refusal> {
    let mut policy = Policy {
        principals: Vec::with_capacity(raw.principal.len()),
        tokens: HashMap::new(),
        certs: HashMap::new(),
        listeners: HashMap::new(),
    };
    let mut spans = Vec::with_capacity(raw.principal.len());
    for principal in raw.principal {
        spans.push(principal.name.span());
        policy.add(principal)?;
    }
    if policy.principals.is_empty() {
        return Err((0..0, "the policy names no principal ([[principal]])".into()));
    }
    // In the file's order, so a refusal names the later of two entries.
    let mut listeners: Vec<_> = raw.listeners.into_iter().collect();
    listeners.sort_by_key(|(listener, _)| listener.span().start);
    for (listener, name) in listeners {
        policy.add_listener(&listener, &name)?;
    }
    for (id, span) in spans.into_iter().enumerate() {
        policy.check_reachable(id, span)?;
    }
    Ok(policy)
}

impl Policy {
    fn add(&mut self, raw: RawPrincipal) -> Result<(), Refusal> {
        let id = self.principals.len();
        let name = checked_name(&raw.name)?;
        if self.names().any(|n| n == name) {
            return Err((
                raw.name.span(),
                format!("two principals are named `{name}`"),
            ));
        }
        for token in &raw.tokens {
            let hash = TokenHash::parse(token.get_ref()).map_err(|e| (token.span(), e))?;
            if let Some(other) = self.tokens.insert(hash, id) {
                return Err((token.span(), self.taken("token", other, id, name)));
            }
        }
        for cert in &raw.certs {
            let cert_name = CertName::parse(cert.get_ref()).map_err(|e| (cert.span(), e))?;
            if let Some(other) = self.certs.insert(cert_name, id) {
                return Err((cert.span(), self.taken("cert", other, id, name)));
            }
        }
        let grants = raw
            .grants
            .iter()
            .map(checked_grant)
            .collect::<Result<_, _>>()?;
        self.principals.push(Principal {
            name: name.to_owned(),
            grants: Grants::new(grants),
        });
        Ok(())
    }

    fn taken(&self, what: &str, other: PrincipalId, id: PrincipalId, name: &str) -> String {
        match other == id {
            true => format!("principal `{name}` lists this {what} twice"),
            false => format!(
                "this {what} is also principal `{}`'s: a {what} names one principal",
                self.principals[other].name
            ),
        }
    }

    fn add_listener(
        &mut self,
        listener: &Spanned<String>,
        name: &Spanned<String>,
    ) -> Result<(), Refusal> {
        let bound = bound_listener(listener.get_ref()).map_err(|e| (listener.span(), e))?;
        let Some(id) = self.names().position(|n| n == name.get_ref()) else {
            let why = format!(
                "listener `{}` names no principal of this policy",
                listener.get_ref()
            );
            return Err((name.span(), format!("{why}: `{}`", name.get_ref())));
        };
        if self.listeners.insert(bound, id).is_some() {
            return Err((listener.span(), "this listener is named twice".into()));
        }
        Ok(())
    }

    fn check_reachable(&self, id: PrincipalId, span: Range<usize>) -> Result<(), Refusal> {
        let reachable = self.tokens.values().any(|&p| p == id)
            || self.certs.values().any(|&p| p == id)
            || self.listeners.values().any(|&p| p == id);
        match reachable {
            true => Ok(()),
            false => Err((
                span,
                format!(
                    "nothing can act as principal `{}`: give it a token, a cert or a listener",
                    self.principals[id].name
                ),
            )),
        }
    }
}

fn checked_name(name: &Spanned<String>) -> Result<&str, Refusal> {
    let text = name.get_ref().as_str();
    let valid = !text.is_empty()
        && text.len() <= MAX_NAME_LEN
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-@".contains(&b));
    if !valid {
        let why = format!(
            "principal name `{text}`: use 1 to {MAX_NAME_LEN} of A-Z a-z 0-9 . _ - @ \
             (it labels log lines and metrics)"
        );
        return Err((name.span(), why));
    }
    if RESERVED_NAMES.contains(&text) {
        let why = format!("principal name `{text}` is reserved (the metrics' label for connections without a principal)");
        return Err((name.span(), why));
    }
    Ok(text)
}

fn checked_grant(raw: &Spanned<RawGrant>) -> Result<Grant, Refusal> {
    let grant = raw.get_ref();
    if grant.tubes.is_empty() || grant.actions.is_empty() {
        let why = "a grant needs at least one tube pattern and one action";
        return Err((raw.span(), why.into()));
    }
    let tubes = grant
        .tubes
        .iter()
        .map(|t| TubePattern::new(t.get_ref()).map_err(|e| (t.span(), e)))
        .collect::<Result<_, _>>()?;
    Ok(Grant::new(tubes, &grant.actions))
}

/// A `[listeners]` key as the server spells the listener once bound:
/// `unix:PATH`, or `ADDR:PORT` with a numeric address.
fn bound_listener(text: &str) -> Result<String, String> {
    if let Some(path) = text.strip_prefix("unix:") {
        if !path.is_empty() {
            return Ok(text.to_owned());
        }
    }
    match text.parse::<SocketAddr>() {
        Ok(addr) => Ok(addr.to_string()),
        Err(_) => Err(format!(
            "listener `{text}` is not ADDR:PORT or unix:PATH: name it as the server binds it \
             (`127.0.0.1:11300`, `[::1]:11300`, `unix:/run/sprout/sprout.sock`)"
        )),
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
