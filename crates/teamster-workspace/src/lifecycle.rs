//! [`Workspaces`]: the lifecycle of sessions' workspaces on one provider. A workspace is made
//! ahead of the first tool call or by it ([`Workspaces::provision`]), reported with its usage
//! and files ([`Workspaces::report`]), and destroyed while its session goes on
//! ([`Workspaces::destroy`]). Whether one is being made, and why the last attempt failed, is
//! this replica's knowledge; everything else is the provider's, so every replica sharing it
//! reports the same. A turn that makes the workspace says so with `sandbox.created`, which the
//! streams' translators read as the workspace being ready.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use teamster_protocol::workspace::{Workspace, WorkspaceFile, WorkspaceFileKind, WorkspaceStatus};
use teamster_sandbox::{FileKind, Provisioned, SandboxError, SandboxOwner, SandboxProvider, WorkspaceState};

/// The most files a report lists.
pub const MAX_LISTED_FILES: usize = 500;
/// The deepest a report lists.
pub const MAX_LISTED_DEPTH: u32 = 8;
/// The most failures remembered (the oldest go first): a session's next attempt clears its own.
const MAX_FAILURES: usize = 1024;

/// Which files a report lists: those under `path` (the workspace's top level when empty) to
/// `depth` levels.
#[derive(Clone, Debug)]
pub struct FilesQuery {
    pub path: String,
    pub depth: u32,
}

impl Default for FilesQuery {
    fn default() -> FilesQuery {
        FilesQuery { path: String::new(), depth: 1 }
    }
}

/// Where a workspace stands ([`Workspaces::status`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Standing {
    pub status: WorkspaceStatus,
    /// Its sandbox, when it is ready.
    pub sandbox_id: Option<String>,
    /// Why the last attempt to make it failed, with `error`.
    pub error: Option<String>,
}

/// The workspaces of one provider's sandboxes.
pub struct Workspaces {
    provider: Arc<dyn SandboxProvider>,
    /// Sessions whose workspace is being made here.
    provisioning: Mutex<HashSet<String>>,
    /// Why the last attempt to make a session's workspace failed here, with the order it came in.
    failures: Mutex<HashMap<String, (u64, String)>>,
    failure_count: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Workspaces {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Workspaces").field("provider", &self.provider.name()).finish_non_exhaustive()
    }
}

/// Takes a session out of the set of those being made when dropped (also when the attempt's
/// future is).
struct Making<'a> {
    workspaces: &'a Workspaces,
    session_id: &'a str,
}

impl Drop for Making<'_> {
    fn drop(&mut self) {
        self.workspaces.provisioning.lock().unwrap_or_else(PoisonError::into_inner).remove(self.session_id);
    }
}

impl Workspaces {
    pub fn new(provider: Arc<dyn SandboxProvider>) -> Workspaces {
        Workspaces {
            provider,
            provisioning: Mutex::default(),
            failures: Mutex::default(),
            failure_count: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The provider the workspaces are sandboxes of.
    pub fn provider(&self) -> &Arc<dyn SandboxProvider> {
        &self.provider
    }

    /// Finds or makes the workspace of `session_id`, whose files count toward `owner`'s disk
    /// quota; reported as `provisioning` meanwhile, and as `error` after a failure until the
    /// next attempt.
    pub async fn provision(&self, session_id: &str, owner: &SandboxOwner) -> Result<Provisioned, SandboxError> {
        self.provisioning.lock().unwrap_or_else(PoisonError::into_inner).insert(session_id.to_owned());
        let _making = Making { workspaces: self, session_id };
        let made = self.provider.provision(session_id, owner).await;
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        match &made {
            Ok(_) => {
                failures.remove(session_id);
            }
            Err(error) => {
                if failures.len() >= MAX_FAILURES
                    && let Some(oldest) = failures.iter().min_by_key(|(_, (order, _))| *order).map(|(id, _)| id.clone())
                {
                    failures.remove(&oldest);
                }
                let order = self.failure_count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                failures.insert(session_id.to_owned(), (order, error.to_string()));
            }
        }
        made
    }

    /// Destroys the workspace of `session_id` (its running commands are killed first); the
    /// session's next tool call makes a fresh one.
    pub async fn destroy(&self, session_id: &str) -> Result<(), SandboxError> {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner).remove(session_id);
        self.provider.reset(session_id).await
    }

    /// Removes a deleted session's workspace, and what is known of it here.
    pub async fn remove(&self, session_id: &str) -> Result<(), SandboxError> {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner).remove(session_id);
        self.provider.destroy(session_id).await
    }

    /// The status of the workspace of `session_id` (without its files).
    pub async fn status(&self, session_id: &str) -> Result<Standing, SandboxError> {
        let (status, state) = self.state(session_id).await?;
        let sandbox_id = match state {
            Some(WorkspaceState::Ready { sandbox_id, .. }) => Some(sandbox_id),
            _ => None,
        };
        let error = (status == WorkspaceStatus::Error).then(|| self.failure(session_id)).flatten();
        Ok(Standing { status, sandbox_id, error })
    }

    /// The workspace of `session_id` as its session's users see it: its status, usage and the
    /// files `files` asks for.
    pub async fn report(&self, session_id: &str, files: &FilesQuery) -> Result<Workspace, SandboxError> {
        let (status, state) = self.state(session_id).await?;
        let mut report = Workspace {
            status,
            error: None,
            provider: Some(self.provider.name().to_owned()),
            sandbox_id: None,
            used_bytes: None,
            quota_bytes: None,
            files: Vec::new(),
            files_truncated: false,
        };
        match state {
            Some(WorkspaceState::Ready { sandbox_id, used, quota_bytes }) => {
                let depth = files.depth.clamp(1, MAX_LISTED_DEPTH);
                let listing = self.provider.list_files(&sandbox_id, &files.path, depth, MAX_LISTED_FILES).await?;
                report.files = listing.entries.into_iter().map(|entry| WorkspaceFile { path: entry.path, kind: kind(entry.kind), bytes: entry.bytes }).collect();
                report.files_truncated = listing.truncated;
                report.used_bytes = used.map(|(bytes, _)| bytes);
                report.quota_bytes = (quota_bytes != u64::MAX).then_some(quota_bytes);
                report.sandbox_id = Some(sandbox_id);
            }
            _ if status == WorkspaceStatus::Error => report.error = self.failure(session_id),
            _ => {}
        }
        Ok(report)
    }

    /// The status, and the provider's state when it was asked.
    async fn state(&self, session_id: &str) -> Result<(WorkspaceStatus, Option<WorkspaceState>), SandboxError> {
        if self.provisioning.lock().unwrap_or_else(PoisonError::into_inner).contains(session_id) {
            return Ok((WorkspaceStatus::Provisioning, None));
        }
        let state = self.provider.workspace(session_id).await?;
        let status = match &state {
            WorkspaceState::Ready { .. } => WorkspaceStatus::Ready,
            WorkspaceState::Destroyed => WorkspaceStatus::Destroyed,
            WorkspaceState::Absent if self.failure(session_id).is_some() => WorkspaceStatus::Error,
            WorkspaceState::Absent => WorkspaceStatus::None,
        };
        Ok((status, Some(state)))
    }

    fn failure(&self, session_id: &str) -> Option<String> {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner).get(session_id).map(|(_, error)| error.clone())
    }
}

fn kind(kind: FileKind) -> WorkspaceFileKind {
    match kind {
        FileKind::File => WorkspaceFileKind::File,
        FileKind::Directory => WorkspaceFileKind::Directory,
        FileKind::Link => WorkspaceFileKind::Link,
        FileKind::Other => WorkspaceFileKind::Other,
    }
}
