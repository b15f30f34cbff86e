//! Tube patterns in a policy's grants: `*` matches any run of characters
//! (none too), `?` exactly one, anything else itself. A pattern holds only
//! tube-name characters and the two wildcards, so a typo such as
//! `orders/#` is refused when the policy loads rather than silently
//! matching nothing.

use sprout_protocol::{is_name_char, MAX_TUBE_NAME_LEN};

/// One pattern of a grant's `tubes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TubePattern(Box<str>);

impl TubePattern {
    /// Checks `text`; the error says what is wrong with it.
    pub fn new(text: &str) -> Result<TubePattern, String> {
        if text.is_empty() {
            return Err("an empty tube pattern matches no tube".into());
        }
        if let Some(c) = text.chars().find(|&c| !is_pattern_char(c)) {
            return Err(format!(
                "tube pattern `{text}` has `{c}`, which no tube name has \
                 (names use A-Z a-z 0-9 - + / ; . $ _ ( ); patterns add * and ?)"
            ));
        }
        if text.bytes().filter(|&b| b != b'*').count() > MAX_TUBE_NAME_LEN {
            return Err(format!(
                "tube pattern `{text}` matches no tube: names have at most \
                 {MAX_TUBE_NAME_LEN} bytes"
            ));
        }
        Ok(TubePattern(text.into()))
    }

    /// Whether the pattern matches every name (it is made of `*` alone).
    pub fn matches_all(&self) -> bool {
        self.0.bytes().all(|b| b == b'*')
    }

    /// Whether `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        matches(self.0.as_bytes(), name.as_bytes())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_pattern_char(c: char) -> bool {
    c.is_ascii() && (is_name_char(c as u8) || c == '*' || c == '?')
}

/// Wildcard matching in linear space: on a mismatch, go back to the last
/// `*` and let it take one more character (a later `*` supersedes an
/// earlier one, so no deeper backtracking is needed).
fn matches(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching() {
        for (pattern, name, want) in [
            ("orders", "orders", true),
            ("orders", "orders2", false),
            ("orders", "order", false),
            ("orders.*", "orders.eu", true),
            ("orders.*", "orders.", true),
            ("orders.*", "orders", false),
            ("orders.*", "ordersX", false),
            ("*", "default", true),
            ("**", "a", true),
            ("*.eu", "orders.eu", true),
            ("*.eu", "orders.us", false),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "abc", true),
            ("a*b*c", "acb", false),
            ("a*b", "abab", true),
            ("a*b", "abac", false),
            ("?", "a", true),
            ("?", "ab", false),
            ("job-??", "job-42", true),
            ("job-??", "job-4", false),
            ("*?", "a", true),
            ("*?", "", false),
            ("(x)$", "(x)$", true),
        ] {
            let p = TubePattern::new(pattern).unwrap();
            assert_eq!(p.matches(name), want, "{pattern} vs {name}");
        }
    }

    #[test]
    fn matches_all() {
        for (pattern, want) in [("*", true), ("***", true), ("?", false), ("a*", false)] {
            assert_eq!(TubePattern::new(pattern).unwrap().matches_all(), want);
        }
    }

    #[test]
    fn refused_patterns() {
        for (pattern, says) in [
            ("", "empty"),
            ("orders#", "has `#`"),
            ("orders eu", "has ` `"),
            ("é", "has `é`"),
        ] {
            let e = TubePattern::new(pattern).unwrap_err();
            assert!(e.contains(says), "{pattern}: {e}");
        }
        assert!(TubePattern::new(&"a".repeat(201)).is_err());
        assert!(TubePattern::new(&format!("{}*", "a".repeat(201))).is_err());
        assert!(TubePattern::new(&format!("{}*", "a".repeat(200))).is_ok());
    }
}
