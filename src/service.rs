//! What a service manager sees of sprout: systemd's readiness protocol and
//! socket activation. Both are no-ops outside systemd.
//!
//! - Readiness (`Type=notify`): one datagram to `$NOTIFY_SOCKET` per state
//!   change. READY=1 goes out once the store is recovered and the accept
//!   loop starts, so a unit ordered after sprout never meets a port that
//!   holds connections unanswered while a large store loads; STOPPING=1
//!   goes out when shutdown begins. A notification that cannot be sent is
//!   logged, never fatal: sprout serves the same with or without it.
//! - Socket activation: systemd passes listening sockets as descriptors 3…
//!   (`$LISTEN_FDS`, `$LISTEN_PID`); sprout then serves those instead of
//!   `-l`/`-p`, as beanstalkd does.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use sd_notify::NotifyState;

/// The listening sockets systemd passed to this process, with their names
/// (`FileDescriptorName=`, by default the socket unit's name); empty
/// without socket activation.
pub fn inherited_sockets() -> io::Result<Vec<(OwnedFd, String)>> {
    // The variables stay set: sprout starts no children that could
    // mistake them for theirs, and unsetting them races other threads.
    let fds = sd_notify::listen_fds_with_names(false)?;
    Ok(fds
        // SAFETY: the descriptors in LISTEN_FDS are this process's (LISTEN_PID
        // was checked) and nothing else in it owns them.
        .map(|(fd, name)| (unsafe { OwnedFd::from_raw_fd(fd) }, name))
        .collect())
}

/// STATUS=: a line for `systemctl status`.
pub fn status(line: &str) {
    send(&[NotifyState::Status(line)]);
}

/// READY=1: recovered and serving.
pub fn ready(line: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(line)]);
}

/// STOPPING=1: shutdown has begun.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::warn!(error = %e, "cannot notify the service manager");
    }
}

/// Whether stderr is connected to the journal: systemd sets
/// `$JOURNAL_STREAM` to its `DEV:INODE` (checked, since a child of a
/// service inherits the variable with other descriptors).
pub fn stderr_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(meta) = std::fs::metadata("/proc/self/fd/2") else {
        return false;
    };
    journal_stream_is(&stream.to_string_lossy(), meta.dev(), meta.ino())
}

/// Does `JOURNAL_STREAM`'s `DEV:INODE` name this device and inode?
fn journal_stream_is(value: &str, dev: u64, ino: u64) -> bool {
    match value.split_once(':') {
        Some((d, i)) => d.parse() == Ok(dev) && i.parse() == Ok(ino),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::journal_stream_is;

    #[test]
    fn journal_stream_values() {
        for (value, want) in [
            ("8:1234", true),
            ("8:1235", false),
            ("9:1234", false),
            ("8", false),
            ("", false),
            ("x:y", false),
            ("8:1234:5", false),
        ] {
            assert_eq!(journal_stream_is(value, 8, 1234), want, "{value:?}");
        }
    }
}
