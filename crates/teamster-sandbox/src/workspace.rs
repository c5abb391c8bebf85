//! Paths in a workspace: what a caller may name, and how the harness opens it without being led
//! outside by `..` or a symbolic link.

use std::path::{Component, Path, PathBuf};

use crate::SandboxError;

/// Where the workspace appears inside the sandbox.
pub const WORKSPACE_DIR: &str = "/workspace";

/// The longest path a caller may name.
const MAX_PATH_BYTES: usize = 4096;

/// The relative path a caller's `path` names in the workspace: a relative path, or an absolute
/// one under [`WORKSPACE_DIR`]. `..`, other absolute paths, NUL bytes and the workspace itself
/// are refused. `.` components are dropped.
pub(crate) fn relative_path(path: &str) -> Result<PathBuf, SandboxError> {
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
    let inside = match path.strip_prefix(WORKSPACE_DIR) {
        Some("") => "",
        Some(rest) if rest.starts_with('/') => rest.trim_start_matches('/'),
        _ if path.starts_with('/') => return Err(invalid("absolute paths must be under /workspace")),
        _ => path,
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
        return Err(invalid("the path names the workspace itself"));
    }
    Ok(relative)
}

/// A path as shown in an error: cut to 200 characters.
fn shown(path: &str) -> String {
    match path.char_indices().nth(200) {
        Some((end, _)) => format!("{}…", &path[..end]),
        None => path.to_owned(),
    }
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
    fn only_paths_inside_the_workspace_are_accepted() {
        let cases: [(&str, Option<&str>); 12] = [
            ("out.csv", Some("out.csv")),
            ("./reports/q1.pdf", Some("reports/q1.pdf")),
            ("/workspace/reports/q1.pdf", Some("reports/q1.pdf")),
            ("/workspace//a", Some("a")),
            ("/workspace", None),
            ("/workspacefoo/a", None),
            ("/etc/passwd", None),
            ("../secret", None),
            ("a/../../b", None),
            ("", None),
            (".", None),
            ("a\0b", None),
        ];
        for (path, expected) in cases {
            let got = relative_path(path).ok();
            assert_eq!(got.as_deref(), expected.map(Path::new), "{path:?}");
        }
    }
}
