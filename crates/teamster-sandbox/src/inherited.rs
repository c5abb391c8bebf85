//! Descriptors the harness inherited from whatever started it. Rust opens every descriptor of
//! its own close-on-exec, but one inherited open (a shell's `7<secret`, a supervisor's socket)
//! would pass through `bwrap` into every sandbox. [`close_on_exec`] marks them all, once, before
//! the first sandbox starts.

use std::io;

/// Marks every open descriptor above standard error close-on-exec. Returns how many it changed.
pub(crate) fn close_on_exec() -> io::Result<usize> {
    let mut changed = 0;
    // The descriptors are listed first and changed after: the listing holds one open itself.
    let descriptors: Vec<i32> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in descriptors {
        if set_close_on_exec(fd)? {
            changed += 1;
        }
    }
    Ok(changed)
}

/// Sets `FD_CLOEXEC` on `fd`; false when it was set already or `fd` is closed by now (the
/// listing's own descriptor is).
#[allow(unsafe_code)]
fn set_close_on_exec(fd: i32) -> io::Result<bool> {
    // SAFETY: fcntl with F_GETFD/F_SETFD only reads and sets a descriptor's flags; it touches no
    // memory, and on a descriptor that is not open it fails with EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        let error = io::Error::last_os_error();
        return if error.raw_os_error() == Some(libc::EBADF) { Ok(false) } else { Err(error) };
    }
    if flags & libc::FD_CLOEXEC != 0 {
        return Ok(false);
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(true)
}
