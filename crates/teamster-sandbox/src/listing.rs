//! Listing a sandbox's files from the host: a directory under `/workspace` or `/tmp` walked
//! breadth first to a depth, never following a symbolic link (a link is listed as one), with
//! a bound on the entries. The directory the caller names is checked to be what its canonical
//! path names (no link on the way), and each entry is read with `fstatat` in its listed
//! directory, not following it.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::SandboxError;

/// What a listed entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    File,
    Directory,
    /// A symbolic link, not followed.
    Link,
    /// A FIFO, a socket or a device node.
    Other,
}

impl FileKind {
    /// The kind as a tool result names it.
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::File => "file",
            FileKind::Directory => "directory",
            FileKind::Link => "link",
            FileKind::Other => "other",
        }
    }
}

/// One entry of a [`Listing`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedFile {
    /// Its path as the sandbox shows it (`/workspace/src/main.rs`).
    pub path: String,
    pub kind: FileKind,
    /// Its length in bytes (a link's, its target's name).
    pub bytes: u64,
    /// How deep under the listed directory: 1 for its own entries.
    pub depth: u32,
}

/// The files under a directory of a sandbox ([`crate::SandboxProvider::list_files`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// The entries, directories before what they hold, each level in name order.
    pub entries: Vec<ListedFile>,
    /// Whether the walk stopped at its bound with entries left unlisted.
    pub truncated: bool,
}

/// Lists `relative` under `area` (a canonical directory on the host, shown as `inside`) to
/// `depth` levels, at most `max_entries` entries.
pub(crate) fn list_beneath(area: &Path, inside: &Path, relative: &Path, depth: u32, max_entries: usize, shown: &str) -> Result<Listing, SandboxError> {
    let start = area.join(relative);
    let entries = open_dir(&start).map_err(|error| match error {
        Opened::Missing => SandboxError::NoSuchFile(shown.to_owned()),
        Opened::NotADirectory => SandboxError::InvalidRequest(format!("{shown} is not a directory")),
        Opened::Outside => SandboxError::InvalidPath { path: shown.to_owned(), reason: "it leads outside the workspace".to_owned() },
        Opened::Failed(error) => SandboxError::io(format!("listing {shown}"))(error),
    })?;
    let mut listing = Listing::default();
    let mut pending: VecDeque<(PathBuf, u32, std::fs::ReadDir)> = VecDeque::from([(relative.to_path_buf(), 1, entries)]);
    while let Some((dir, level, entries)) = pending.pop_front() {
        let mut found: Vec<(std::ffi::OsString, std::fs::Metadata)> = entries
            .filter_map(Result::ok)
            // `fstatat` in the listed directory, not following a link.
            .filter_map(|entry| entry.metadata().ok().map(|meta| (entry.file_name(), meta)))
            .collect();
        found.sort_by(|left, right| left.0.cmp(&right.0));
        for (name, meta) in found {
            if listing.entries.len() == max_entries {
                listing.truncated = true;
                return Ok(listing);
            }
            let path = dir.join(&name);
            let kind = match meta.file_type() {
                kind if kind.is_symlink() => FileKind::Link,
                kind if kind.is_dir() => FileKind::Directory,
                kind if kind.is_file() => FileKind::File,
                _ => FileKind::Other,
            };
            listing.entries.push(ListedFile { path: inside.join(&path).to_string_lossy().into_owned(), kind, bytes: meta.len(), depth: level });
            if kind == FileKind::Directory && level < depth {
                // A directory swapped for a link since it was listed is not entered.
                if let Ok(entries) = open_dir(&area.join(&path)) {
                    pending.push_back((path, level + 1, entries));
                }
            }
        }
    }
    Ok(listing)
}

/// Why a directory was not opened.
enum Opened {
    Missing,
    NotADirectory,
    Outside,
    Failed(std::io::Error),
}

/// Opens the directory at `path` (canonical) for listing, refusing a link anywhere on the way:
/// the opened directory's real path must be `path` itself.
fn open_dir(path: &Path) -> Result<std::fs::ReadDir, Opened> {
    let handle = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH | libc::O_NOFOLLOW).open(path).map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => Opened::Missing,
        _ => Opened::Failed(error),
    })?;
    let held = PathBuf::from(format!("/proc/self/fd/{}", handle.as_raw_fd()));
    match std::fs::read_link(&held) {
        Ok(real) if real == path => {}
        Ok(_) => return Err(Opened::Outside),
        Err(error) => return Err(Opened::Failed(error)),
    }
    let meta = handle.metadata().map_err(Opened::Failed)?;
    if meta.file_type().is_symlink() {
        return Err(Opened::Outside);
    }
    if !meta.is_dir() {
        return Err(Opened::NotADirectory);
    }
    // Through the handle: the directory checked above, whatever the path names now.
    std::fs::read_dir(&held).map_err(Opened::Failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("teamster-listing-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("area/src/deep/deeper")).unwrap();
        std::fs::write(dir.join("area/README.md"), "hello").unwrap();
        std::fs::write(dir.join("area/src/main.rs"), "fn main() {}").unwrap();
        std::fs::write(dir.join("area/src/deep/deeper/x.txt"), "x").unwrap();
        std::fs::create_dir_all(dir.join("outside")).unwrap();
        std::fs::write(dir.join("outside/secret"), "secret").unwrap();
        std::os::unix::fs::symlink(dir.join("outside"), dir.join("area/escape")).unwrap();
        std::fs::canonicalize(&dir).unwrap()
    }

    #[test]
    fn lists_to_a_depth_in_order_and_never_follows_a_link() {
        let dir = scratch("depth");
        let area = dir.join("area");
        let listing = list_beneath(&area, Path::new("/workspace"), Path::new(""), 2, 100, "/workspace").unwrap();
        let shown: Vec<(&str, FileKind, u32)> = listing.entries.iter().map(|entry| (entry.path.as_str(), entry.kind, entry.depth)).collect();
        assert_eq!(
            shown,
            [
                ("/workspace/README.md", FileKind::File, 1),
                ("/workspace/escape", FileKind::Link, 1),
                ("/workspace/src", FileKind::Directory, 1),
                ("/workspace/src/deep", FileKind::Directory, 2),
                ("/workspace/src/main.rs", FileKind::File, 2),
            ]
        );
        assert!(!listing.truncated);
        assert_eq!(listing.entries[0].bytes, 5);
        // A link named as the directory to list is refused, not followed.
        let refused = list_beneath(&area, Path::new("/workspace"), Path::new("escape"), 1, 100, "escape").unwrap_err();
        assert!(matches!(refused, SandboxError::InvalidPath { .. }), "{refused:?}");
        let missing = list_beneath(&area, Path::new("/workspace"), Path::new("nope"), 1, 100, "nope").unwrap_err();
        assert!(matches!(missing, SandboxError::NoSuchFile(_)), "{missing:?}");
        let file = list_beneath(&area, Path::new("/workspace"), Path::new("README.md"), 1, 100, "README.md").unwrap_err();
        assert!(matches!(file, SandboxError::InvalidRequest(_)), "{file:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn stops_at_its_bound() {
        let dir = scratch("bound");
        let listing = list_beneath(&dir.join("area"), Path::new("/workspace"), Path::new(""), 10, 3, "/workspace").unwrap();
        assert_eq!(listing.entries.len(), 3);
        assert!(listing.truncated);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
