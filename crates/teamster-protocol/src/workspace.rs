//! A session's workspace (its sandbox's files) as `GET /api/v1/sessions/{id}/workspace` reports
//! it, and the states it goes through, which `workspace.status` events announce.

use serde::{Deserialize, Serialize};

/// Where a session's workspace is in its lifecycle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceStatus {
    /// Not made yet (or the session's agent has no sandbox): the first tool call makes it.
    #[default]
    None,
    /// Being made.
    Provisioning,
    /// Made and usable.
    Ready,
    /// The last attempt to make it failed (`error` says why); the next tool call tries again.
    Error,
    /// Destroyed while the session goes on; the next tool call makes a fresh one.
    Destroyed,
}

impl WorkspaceStatus {
    /// The status as it is written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkspaceStatus::None => "none",
            WorkspaceStatus::Provisioning => "provisioning",
            WorkspaceStatus::Ready => "ready",
            WorkspaceStatus::Error => "error",
            WorkspaceStatus::Destroyed => "destroyed",
        }
    }
}

/// A session's workspace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Workspace {
    pub status: WorkspaceStatus,
    /// Why the last attempt to make it failed (with `error`).
    pub error: Option<String>,
    /// Who runs it (`bubblewrap`); absent when the session's agent has no sandbox.
    pub provider: Option<String>,
    /// Its sandbox's id, under which its files are downloaded (when it is ready).
    pub sandbox_id: Option<String>,
    /// What its files took at the last measurement (allocated bytes), when one was made.
    pub used_bytes: Option<u64>,
    /// Its disk quota in bytes, when it has one.
    pub quota_bytes: Option<u64>,
    /// The files under the listed directory (the workspace's top level unless `path` and
    /// `depth` ask for more), directories before what they hold; empty unless it is ready.
    pub files: Vec<WorkspaceFile>,
    /// Whether more files were there than listed.
    pub files_truncated: bool,
}

/// A file of a workspace's listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkspaceFile {
    /// Its path as the sandbox shows it (`/workspace/src/main.rs`); files are downloaded by it.
    pub path: String,
    pub kind: WorkspaceFileKind,
    /// Its length in bytes.
    pub bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceFileKind {
    File,
    Directory,
    /// A symbolic link (never followed).
    Link,
    /// A FIFO, a socket or a device node.
    Other,
}
