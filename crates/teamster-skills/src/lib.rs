//! Skills: a directory with a `SKILL.md` (front matter with a `name` and a `description`, then
//! markdown) and whatever files it needs. The harness fetches a skill on the host into a
//! [`SkillCache`] (a git repository at a ref, once per commit) or takes a local directory as it
//! is, and the service mounts it read-only into a session's sandbox at `SKILLS_DIR/<name>`
//! (`teamster_sandbox::SandboxProvider::mount_skill`); only the name and description enter the
//! model's context, and the model reads the rest with `exec` when it needs it.
//!
//! `source.rs` checks what a caller names (URLs, refs, paths) and builds the credentials git is
//! given, `git.rs` runs git, `redact.rs` keeps secrets out of messages, `document.rs` parses
//! `SKILL.md`, `cache.rs` is the cache.

mod cache;
mod document;
mod git;
mod redact;
mod source;

use std::path::PathBuf;

pub use cache::SkillCache;
pub use document::{SkillDocument, parse_skill_md};
pub use source::{GitAuth, GitSource};
use teamster_sandbox::is_skill_name;

/// The largest `SKILL.md` read.
pub const MAX_SKILL_MD_BYTES: u64 = 256 * 1024;

/// The most a fetched skill's files may hold together.
pub const MAX_SKILL_BYTES: u64 = 64 * 1024 * 1024;

/// The most files and directories a fetched skill may have.
pub const MAX_SKILL_FILES: u64 = 10_000;

/// A skill ready to mount: its files in a directory on the host, and what its `SKILL.md` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skill {
    /// The name it is mounted under (the name the caller gave, not the one in `SKILL.md`).
    pub name: String,
    /// What it is for, from `SKILL.md`: the text the model sees.
    pub description: String,
    /// The markdown after the front matter.
    pub body: String,
    /// The directory holding its files (and nothing else: no `.git`).
    pub dir: PathBuf,
    /// The commit its files are from, for a skill fetched from git.
    pub commit: Option<String>,
}

/// Why a skill could not be fetched or read. Messages never hold a password, a token, or the
/// credentials of a URL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SkillError {
    /// A name, URL, ref or path the caller gave is not accepted.
    #[error("invalid skill {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    /// Git failed: the repository is unreachable, the ref or the path does not exist, or the
    /// credentials were refused. `message` is git's own, with secrets replaced by `***`.
    #[error("git could not {action} {url}: {message}")]
    Git { action: String, url: String, message: String },
    /// Git ran past its time limit and was stopped.
    #[error("git took longer than {seconds} s to {action} {url}")]
    TimedOut { action: String, url: String, seconds: u64 },
    /// The skill has no `SKILL.md`, or it cannot be understood.
    #[error("malformed SKILL.md: {0}")]
    Malformed(String),
    /// The skill, or its `SKILL.md`, is over its limit.
    #[error("{what} is over the limit of {limit}")]
    TooLarge { what: String, limit: String },
    /// The source's host is somewhere a member's URL may not lead (this host, its private
    /// network, ...), or could not be resolved to check it.
    #[error("{url} cannot be fetched: {reason}")]
    Refused { url: String, reason: String },
    /// Git is not installed on the host.
    #[error("skills cannot be fetched: {0}")]
    Unavailable(String),
    /// The host failed (a directory that cannot be created or read).
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl SkillError {
    fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> SkillError {
        let context = context.into();
        move |source| SkillError::Io { context, source }
    }
}

/// Checks a skill's name, saying what a name may be.
fn check_name(name: &str) -> Result<(), SkillError> {
    if is_skill_name(name) {
        return Ok(());
    }
    Err(SkillError::Invalid {
        field: "name",
        reason: format!(
            "{:?} is not a skill name: 1 to 64 letters, digits, '.', '_' and '-', not '.' or '..'",
            name.chars().take(80).collect::<String>()
        ),
    })
}
