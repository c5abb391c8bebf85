//! Paths in a workspace: what a caller may name, and how the harness opens it without being led
//! outside by `..` or a symbolic link. [`open_beneath`] resolves a path with `openat2(2)` and
//! `RESOLVE_BENEATH` from the area's directory, so a link leading outside is refused by the
//! kernel before anything outside is looked up: the answer is the same whether its target
//! exists or not.

use std::path::{Component, Path, PathBuf};

use crate::SandboxError;

/// Where the workspace appears inside the sandbox.
pub const WORKSPACE_DIR: &str = "/workspace";

/// The longest path a caller may name.
const MAX_PATH_BYTES: usize = 4096;

/// Where a sandbox's private, persistent `/tmp` appears inside it.
pub const TMP_DIR: &str = "/tmp";

/// The two writable places of a sandbox, both kept for the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Area {
    /// `/workspace`.
    Workspace,
    /// The sandbox's own `/tmp`.
    Tmp,
}

impl Area {
    /// The area's directory in the sandbox's directory on the host.
    pub(crate) fn dir_name(self) -> &'static str {
        match self {
            Area::Workspace => "workspace",
            Area::Tmp => "tmp",
        }
    }

    /// Where it appears inside the sandbox.
    pub(crate) fn inside(self) -> &'static str {
        match self {
            Area::Workspace => WORKSPACE_DIR,
            Area::Tmp => TMP_DIR,
        }
    }
}

/// A file a caller named: an area and a relative path in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SandboxPath {
    pub(crate) area: Area,
    pub(crate) relative: PathBuf,
}

impl SandboxPath {
    /// The path as commands see it.
    pub(crate) fn inside(&self) -> PathBuf {
        Path::new(self.area.inside()).join(&self.relative)
    }
}

/// The file a caller's `path` names: a path relative to the workspace, or an absolute one
/// under [`WORKSPACE_DIR`] or [`TMP_DIR`]. `..`, other absolute paths, NUL bytes and the areas
/// themselves are refused. `.` components are dropped.
pub(crate) fn sandbox_path(path: &str) -> Result<SandboxPath, SandboxError> {
    let invalid = |reason: &str| SandboxError::InvalidPath { path: shown(path), reason: reason.to_owned() };
    if path.is_empty() {
        return Err(invalid("the path is empty"));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(invalid("the path is too long"));
    }
    if path.contains('\0') {
        return Err(invalid("the path holds a NUL byte"));
    }
    let under = |area: Area| match path.strip_prefix(area.inside()) {
        Some("") => Some(""),
        Some(rest) if rest.starts_with('/') => Some(rest.trim_start_matches('/')),
        _ => None,
    };
    let (area, inside) = match (under(Area::Workspace), under(Area::Tmp)) {
        (Some(rest), _) => (Area::Workspace, rest),
        (_, Some(rest)) => (Area::Tmp, rest),
        _ if path.starts_with('/') => return Err(invalid("absolute paths must be under /workspace or /tmp")),
        _ => (Area::Workspace, path),
    };
    let mut relative = PathBuf::new();
    for component in Path::new(inside).components() {
        match component {
            Component::Normal(part) => relative.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err(invalid("`..` is not allowed")),
            Component::RootDir | Component::Prefix(_) => return Err(invalid("the path is not relative")),
        }
    }
    if relative.as_os_str().is_empty() {
        return Err(invalid("the path names a directory of the sandbox itself"));
    }
    Ok(SandboxPath { area, relative })
}

/// The directory a caller's `path` names for a listing: as [`sandbox_path`] names files, and
/// the areas themselves too (`""` and `.` for the workspace, `/workspace`, `/tmp`).
pub(crate) fn sandbox_dir(path: &str) -> Result<SandboxPath, SandboxError> {
    let trimmed = if path.len() > 1 { path.trim_end_matches('/') } else { path };
    let root = |area: Area| Ok(SandboxPath { area, relative: PathBuf::new() });
    match trimmed {
        "" | "." => root(Area::Workspace),
        WORKSPACE_DIR => root(Area::Workspace),
        TMP_DIR => root(Area::Tmp),
        _ => sandbox_path(path),
    }
}

/// A path as shown in an error: cut to 200 characters.
fn shown(path: &str) -> String {
    match path.char_indices().nth(200) {
        Some((end, _)) => format!("{}…", &path[..end]),
        None => path.to_owned(),
    }
}

/// Opens `relative` for reading beneath `area` (the workspace or the sandbox's `/tmp` on the host),
/// never leaving it: `..` above it, an absolute symbolic link, or a link climbing out of it is
/// refused with [`SandboxError::InvalidPath`] without the kernel looking up anything outside
/// (`RESOLVE_BENEATH`), and `/proc`'s magic links are refused too (`RESOLVE_NO_MAGICLINKS`).
/// Opened non-blocking, so a FIFO the sandbox left at the path does not hold the harness. On
/// kernels before 5.6, which lack `openat2`, the path is opened as the host sees it and checked
/// afterwards ([`check_opened_inside`]): a link outside is still refused, but it is followed first.
pub(crate) fn open_beneath(area: &Path, relative: &Path, path: &str) -> Result<std::fs::File, SandboxError> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    use rustix::io::Errno;
    let outside = || SandboxError::InvalidPath { path: shown(path), reason: "it leads outside the workspace".to_owned() };
    let dir = rustix::fs::open(area, OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
        .map_err(|error| SandboxError::io("opening the workspace")(error.into()))?;
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    // The kernel answers EAGAIN when a rename raced the walk: it cannot vouch for the result.
    let mut opened = rustix::fs::openat2(&dir, relative, flags, Mode::empty(), resolve);
    for _ in 0..8 {
        if !matches!(opened, Err(Errno::AGAIN)) {
            break;
        }
        opened = rustix::fs::openat2(&dir, relative, flags, Mode::empty(), resolve);
    }
    match opened {
        Ok(fd) => {
            let file = std::fs::File::from(fd);
            check_opened_inside(area, &file, path)?;
            Ok(file)
        }
        Err(Errno::XDEV | Errno::LOOP) => Err(outside()),
        Err(Errno::NOENT | Errno::NOTDIR) => Err(SandboxError::NoSuchFile(shown(path))),
        Err(Errno::NOSYS) => open_checked(area, relative, path),
        Err(error) => Err(SandboxError::io(format!("opening {}", shown(path)))(error.into())),
    }
}

/// [`open_beneath`] where the kernel has no `openat2`: opened as the host sees the path, then
/// checked to lie inside `area`.
fn open_checked(area: &Path, relative: &Path, path: &str) -> Result<std::fs::File, SandboxError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(area.join(relative))
        .map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound => SandboxError::NoSuchFile(shown(path)),
            _ => SandboxError::io(format!("opening {}", shown(path)))(error),
        })?;
    check_opened_inside(area, &file, path)?;
    Ok(file)
}

/// Checks that `opened`, an open file, lies inside `root` (both as the kernel resolved them), so a
/// symbolic link swapped in between a check and the open cannot lead outside.
pub(crate) fn check_opened_inside(root: &Path, opened: &std::fs::File, path: &str) -> Result<(), SandboxError> {
    use std::os::fd::AsRawFd;
    let real = std::fs::read_link(format!("/proc/self/fd/{}", opened.as_raw_fd()))
        .map_err(SandboxError::io("resolving an opened file"))?;
    let root = std::fs::canonicalize(root).map_err(SandboxError::io("resolving the workspace"))?;
    if real.starts_with(&root) && real != root {
        Ok(())
    } else {
        Err(SandboxError::InvalidPath { path: shown(path), reason: "it leads outside the workspace".to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_inside_the_sandbox_are_accepted() {
        let cases: [(&str, Option<(Area, &str)>); 14] = [
            ("out.csv", Some((Area::Workspace, "out.csv"))),
            ("./reports/q1.pdf", Some((Area::Workspace, "reports/q1.pdf"))),
            ("/workspace/reports/q1.pdf", Some((Area::Workspace, "reports/q1.pdf"))),
            ("/workspace//a", Some((Area::Workspace, "a"))),
            ("/tmp/out.txt", Some((Area::Tmp, "out.txt"))),
            ("/workspace", None),
            ("/tmp", None),
            ("/workspacefoo/a", None),
            ("/etc/passwd", None),
            ("../secret", None),
            ("a/../../b", None),
            ("", None),
            (".", None),
            ("a\0b", None),
        ];
        for (path, expected) in cases {
            let got = sandbox_path(path).ok();
            let expected = expected.map(|(area, relative)| SandboxPath { area, relative: PathBuf::from(relative) });
            assert_eq!(got, expected, "{path:?}");
        }
    }
}
