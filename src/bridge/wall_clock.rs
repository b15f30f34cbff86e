//! The bridge's one clock read: Unix time in milliseconds, the unit of
//! Redis's expiries and of every deadline the bridge keeps.

/// The current Unix time in milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
