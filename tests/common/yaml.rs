//! beanstalkd's YAML documents (`stats`, `stats-job`, `list-tubes`, ...),
//! read as flat lists.

/// Parses beanstalkd's flat YAML dictionary (`---\nkey: value\n...`).
#[track_caller]
pub fn parse_yaml_map(body: &str) -> Vec<(String, String)> {
    let rest = body
        .strip_prefix("---\n")
        .unwrap_or_else(|| panic!("YAML body must start with ---\\n: {body:?}"));
    assert!(
        rest.ends_with('\n'),
        "YAML body must end with \\n: {body:?}"
    );
    rest.lines()
        .map(|l| match l.split_once(": ") {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => panic!("not a `key: value` line: {l:?}"),
        })
        .collect()
}

/// Parses beanstalkd's YAML list (`---\n- a\n- b\n`).
#[track_caller]
pub fn parse_yaml_list(body: &str) -> Vec<String> {
    let rest = body
        .strip_prefix("---\n")
        .unwrap_or_else(|| panic!("YAML body must start with ---\\n: {body:?}"));
    rest.lines()
        .map(|l| match l.strip_prefix("- ") {
            Some(v) => v.to_string(),
            None => panic!("not a `- item` line: {l:?}"),
        })
        .collect()
}

#[track_caller]
pub fn lookup(map: &[(String, String)], key: &str) -> String {
    map.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no key {key:?} in {map:?}"))
}
