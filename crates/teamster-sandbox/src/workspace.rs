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

/// What [`create_beneath`] opened: the file to write, or nothing where the kernel lacks
/// `openat2` (the caller then writes from inside the sandbox).
pub(crate) enum Created {
    File(std::fs::File),
    Unsupported,
}

/// Opens `relative` beneath `area` for writing, empty, resolving it as [`open_beneath`] does
/// (a symbolic link is followed only while it stays beneath `area`), and makes its missing
/// parent directories the same way. What it creates gets `owner` (the sandbox's user, when the
/// harness runs as root). An existing file is written only when it is a regular file of one
/// link and belongs to `owner` (any owner when `None`), and is emptied only once that is
/// checked: a write never reaches anything but the workspace's own file, and no shell starts.
pub(crate) fn create_beneath(area: &Path, relative: &Path, path: &str, owner: Option<u32>) -> Result<Created, SandboxError> {
    use std::os::unix::fs::MetadataExt;

    use rustix::fs::{Mode, OFlags, ResolveFlags};
    use rustix::io::Errno;
    let outside = || SandboxError::InvalidPath { path: shown(path), reason: "it leads outside the workspace".to_owned() };
    let failed = |what: &str, error: Errno| SandboxError::io(format!("{what} {}", shown(path)))(error.into());
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    let root = rustix::fs::open(area, OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
        .map_err(|error| SandboxError::io("opening the workspace")(error.into()))?;
    // The kernel answers EAGAIN when a rename raced the walk: it cannot vouch for the result.
    let beneath = |relative: &Path, flags: OFlags, mode: Mode| {
        let mut opened = rustix::fs::openat2(&root, relative, flags | OFlags::CLOEXEC, mode, resolve);
        for _ in 0..8 {
            if !matches!(opened, Err(Errno::AGAIN)) {
                break;
            }
            opened = rustix::fs::openat2(&root, relative, flags | OFlags::CLOEXEC, mode, resolve);
        }
        opened
    };
    let chown = |file: &std::fs::File| match owner {
        Some(uid) => std::os::unix::fs::fchown(file, Some(uid), Some(uid)).map_err(SandboxError::io("giving the sandbox its file")),
        None => Ok(()),
    };

    // Each missing parent is made in the directory its path resolved to beneath the area.
    let mut parent = PathBuf::new();
    if let Some(parents) = relative.parent() {
        for component in parents.components() {
            let next = parent.join(component);
            match beneath(&next, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()) {
                Ok(_) => {}
                Err(Errno::NOENT) => {
                    let here = if parent.as_os_str().is_empty() { Path::new(".") } else { parent.as_path() };
                    let dir = beneath(here, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).map_err(|error| failed("making a directory for", error))?;
                    match rustix::fs::mkdirat(&dir, component.as_os_str(), Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(error) => return Err(failed("making a directory for", error)),
                    }
                    let made = beneath(&next, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).map_err(|error| failed("making a directory for", error))?;
                    chown(&std::fs::File::from(made))?;
                }
                Err(Errno::NOSYS) => return Ok(Created::Unsupported),
                Err(Errno::XDEV | Errno::LOOP) => return Err(outside()),
                Err(Errno::NOTDIR) => {
                    return Err(SandboxError::InvalidPath { path: shown(path), reason: "one of its parents is not a directory".to_owned() });
                }
                Err(error) => return Err(failed("opening a directory for", error)),
            }
            parent = next;
        }
    }

    let flags = OFlags::WRONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
    let (file, created) = match beneath(relative, flags | OFlags::CREATE | OFlags::EXCL, Mode::from_raw_mode(0o644)) {
        Ok(fd) => (std::fs::File::from(fd), true),
        Err(Errno::EXIST) => match beneath(relative, flags, Mode::empty()) {
            Ok(fd) => (std::fs::File::from(fd), false),
            Err(Errno::XDEV | Errno::LOOP) => return Err(outside()),
            Err(Errno::NXIO | Errno::ISDIR) => {
                return Err(SandboxError::InvalidPath { path: shown(path), reason: "it is not a regular file".to_owned() });
            }
            Err(error) => return Err(failed("opening", error)),
        },
        Err(Errno::NOSYS) => return Ok(Created::Unsupported),
        Err(Errno::XDEV | Errno::LOOP) => return Err(outside()),
        Err(Errno::ISDIR) => {
            return Err(SandboxError::InvalidPath { path: shown(path), reason: "it is not a regular file".to_owned() });
        }
        Err(error) => return Err(failed("creating", error)),
    };
    check_opened_inside(area, &file, path)?;
    let meta = file.metadata().map_err(SandboxError::io("reading a file's metadata"))?;
    if created {
        chown(&file)?;
    } else if !meta.is_file() || meta.nlink() != 1 || owner.is_some_and(|uid| meta.uid() != uid) {
        return Err(SandboxError::InvalidPath {
            path: shown(path),
            reason: "it is not a regular file of the sandbox's own".to_owned(),
        });
    } else {
        file.set_len(0).map_err(SandboxError::io(format!("emptying {}", shown(path))))?;
    }
    Ok(Created::File(file))
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

    /// Writes `text` through [`create_beneath`] as the sandbox user `owner`.
    fn write(area: &Path, relative: &str, owner: Option<u32>, text: &str) -> Result<(), SandboxError> {
        use std::io::Write;
        match create_beneath(area, Path::new(relative), relative, owner)? {
            Created::File(mut file) => file.write_all(text.as_bytes()).map_err(SandboxError::io("writing")),
            Created::Unsupported => panic!("this kernel has openat2"),
        }
    }

    #[test]
    fn files_are_created_beneath_the_area_for_its_user_and_nothing_else_is_written() {
        use std::os::unix::fs::MetadataExt;
        let scratch = std::env::temp_dir().join(format!("teamster-create-beneath-{}", std::process::id()));
        let (area, host) = (scratch.join("workspace"), scratch.join("host"));
        std::fs::create_dir_all(&area).unwrap();
        std::fs::create_dir_all(&host).unwrap();
        let secret = host.join("secret");
        std::fs::write(&secret, "host").unwrap();
        let root = crate::programs::running_as_root();
        let owner = root.then_some(54_321);

        write(&area, "deep/er/new.txt", owner, "one").unwrap();
        assert_eq!(std::fs::read_to_string(area.join("deep/er/new.txt")).unwrap(), "one");
        write(&area, "deep/er/new.txt", owner, "2").unwrap();
        assert_eq!(std::fs::read_to_string(area.join("deep/er/new.txt")).unwrap(), "2", "an existing file is emptied first");
        if let Some(uid) = owner {
            for made in ["deep", "deep/er", "deep/er/new.txt"] {
                assert_eq!(std::fs::metadata(area.join(made)).unwrap().uid(), uid, "{made}");
            }
        }

        // Links out of the area, as a parent or as the file, absolute or climbing.
        std::os::unix::fs::symlink(&host, area.join("to-host")).unwrap();
        std::os::unix::fs::symlink("../host/secret", area.join("climbing")).unwrap();
        std::os::unix::fs::symlink(&secret, area.join("absolute")).unwrap();
        for escape in ["to-host/secret", "to-host/new", "climbing", "absolute", "../host/secret"] {
            let refused = write(&area, escape, owner, "stolen").unwrap_err();
            assert!(matches!(refused, SandboxError::InvalidPath { .. }), "{escape}: {refused:?}");
        }
        // A hard link to a file of another's, a file not the sandbox's, and what is no file.
        std::fs::hard_link(&secret, area.join("hard")).unwrap();
        let fifo = area.join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        std::fs::create_dir(area.join("dir")).unwrap();
        for other in ["hard", "fifo", "dir"] {
            let refused = write(&area, other, owner, "stolen").unwrap_err();
            assert!(matches!(refused, SandboxError::InvalidPath { .. }), "{other}: {refused:?}");
        }
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "host", "the host's file is untouched");
        // A link that stays inside is followed.
        std::os::unix::fs::symlink("deep/er/new.txt", area.join("inside")).unwrap();
        write(&area, "inside", owner, "three").unwrap();
        assert_eq!(std::fs::read_to_string(area.join("deep/er/new.txt")).unwrap(), "three");
        std::fs::remove_dir_all(&scratch).unwrap();
    }

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
