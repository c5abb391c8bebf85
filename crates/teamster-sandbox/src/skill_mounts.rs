//! Where skills appear in a sandbox: each under its name in [`SKILLS_DIR`], mounted read-only
//! by [`crate::SandboxProvider::mount_skill`]. Fetching and reading skills is `teamster-skills`'s.

/// Where a session's skills appear inside its sandbox: skill `<name>` at `SKILLS_DIR/<name>`.
pub const SKILLS_DIR: &str = "/workspace/skills";

/// Where the skills are mounted inside the sandbox; [`SKILLS_DIR`] is a symbolic link to it. A
/// mount point inside the workspace would be a path the sandbox controls, and `bwrap` follows
/// symbolic links in a mount's destination outside the sandbox.
pub(crate) const SKILLS_MOUNT_DIR: &str = "/skills";

/// Whether `name` may name a skill: 1 to 64 letters, digits, `.`, `_` and `-`, not `.` or `..`
/// (it becomes a directory name on the host and in the sandbox).
pub fn is_skill_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name != "."
        && name != ".."
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"._-".contains(&byte))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skill_names_are_safe_directory_names() {
        let long = "a".repeat(65);
        for good in ["pdf", "PDF-tools_2.0", "a", ".hidden", &"a".repeat(64)] {
            assert!(is_skill_name(good), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "ä", "a\0", &long] {
            assert!(!is_skill_name(bad), "{bad:?}");
        }
    }
}
