//! Reading the `stats` and `stats-tube` documents back into figures, so
//! `/metrics` and the API report exactly what the commands report, under
//! the same keys, without a second list of them to keep in step.

/// The `key: value` pairs of a stats document, in order (values unquoted).
pub fn pairs(doc: &[u8]) -> impl Iterator<Item = (&str, &str)> {
    let text = std::str::from_utf8(doc).unwrap_or("");
    text.lines().filter_map(|line| {
        let (key, value) = line.split_once(": ")?;
        Some((key, value.trim_matches('"')))
    })
}

/// The numeric figures of a stats document: numbers as they are, `true`
/// and `false` (drain mode) as 1 and 0; text (version, hostname, id…)
/// left out.
pub fn numeric(doc: &[u8]) -> impl Iterator<Item = (&str, f64)> {
    pairs(doc).filter_map(|(key, value)| {
        let number = match value {
            "true" => 1.0,
            "false" => 0.0,
            _ => value.parse().ok()?,
        };
        Some((key, number))
    })
}

/// One figure of a stats document (0 if absent).
pub fn get(doc: &[u8], key: &str) -> f64 {
    numeric(doc)
        .find(|&(k, _)| k == key)
        .map_or(0.0, |(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_flags_are_figures_text_is_not() {
        let doc = b"---\ncurrent-jobs-ready: 3\nversion: \"0.1.0\"\nrusage-utime: 0.012000\n\
                    draining: false\nhostname: \"box\"\nname: \"emails\"\npid: 77\n";
        let figures: Vec<(&str, f64)> = numeric(doc).collect();
        assert_eq!(
            figures,
            vec![
                ("current-jobs-ready", 3.0),
                ("rusage-utime", 0.012),
                ("draining", 0.0),
                ("pid", 77.0),
            ]
        );
        assert_eq!(get(doc, "pid"), 77.0);
        assert_eq!(get(doc, "missing"), 0.0);
        assert_eq!(pairs(doc).nth(4), Some(("hostname", "box")));
    }
}
