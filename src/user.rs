//! `-u USER`: drop root privileges after the listener is bound, as beanstalkd does.

use std::ffi::CString;
use std::io;

/// Switches the process to `user`'s group and user ids.
pub fn become_user(user: &str) -> io::Result<()> {
    let name = CString::new(user)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "user name contains NUL"))?;
    // SAFETY: getpwnam returns a pointer to static storage or null; we read
    // two fields before any other call that could overwrite it.
    let (uid, gid) = unsafe {
        let pw = libc::getpwnam(name.as_ptr());
        if pw.is_null() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no such user: {user}"),
            ));
        }
        ((*pw).pw_uid, (*pw).pw_gid)
    };
    // SAFETY: plain system calls on integer ids; group first, while we
    // still have the privilege to change it.
    unsafe {
        if libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
