//! Percent-encoding (RFC 3986): every byte but the unreserved ones as
//! `%XX`. For the admin CLI's URL paths and queries and for a password in
//! a Redis URL's userinfo; both need exactly this, so it is said once.

/// `s` with every byte outside `A-Z a-z 0-9 - . _ ~` percent-encoded.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_unreserved_bytes_pass() {
        for (raw, encoded) in [
            ("Az09-._~", "Az09-._~"),
            ("a b/c", "a%20b%2Fc"),
            ("p@ss:w%rd", "p%40ss%3Aw%25rd"),
            ("é", "%C3%A9"),
            ("", ""),
        ] {
            assert_eq!(super::encode(raw), encoded);
        }
    }
}
