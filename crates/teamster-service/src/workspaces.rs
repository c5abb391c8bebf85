//! A session's workspace through the API: reported, made ahead of the first tool call, and
//! destroyed while the session goes on, by the session's creator. The lifecycle itself is
//! `teamster-workspace`'s ([`Workspaces`]); here are who may ask, what the session's agent
//! allows, and telling the session's live channels.

use std::sync::Arc;

use teamster_protocol::workspace::{Workspace, WorkspaceStatus};
use teamster_sandbox::{SandboxError, SandboxOwner};
use teamster_protocol::AgentSpec;
use teamster_store::SessionRecord;
use teamster_workspace::{FilesQuery, Standing, Workspaces};

use crate::sandboxes::wanted;
use crate::error::{Result, ServiceError};
use crate::{Caller, Service, downloads};

/// The workspace of an agent without a sandbox, or of a server that runs none.
fn without_sandbox() -> Workspace {
    Workspace {
        status: WorkspaceStatus::None,
        error: None,
        provider: None,
        sandbox_id: None,
        used_bytes: None,
        quota_bytes: None,
        files: Vec::new(),
        files_truncated: false,
    }
}

/// Sessions' workspaces, for their creators ([`Service::workspaces`]).
pub struct SessionWorkspaces<'a> {
    pub(crate) service: &'a Service,
}

impl SessionWorkspaces<'_> {
    /// The workspace of the caller's session, listing the files `files` asks for. An agent
    /// without a sandbox has none (`status: none`, no provider).
    pub async fn get(&self, caller: &Caller, session_id: &str, files: &FilesQuery) -> Result<Workspace> {
        let (_, _, Some(workspaces)) = self.lookup(caller, session_id).await? else { return Ok(without_sandbox()) };
        workspaces.report(session_id, files).await.map_err(|error| workspace_error(session_id, error))
    }

    /// Makes the workspace of the caller's session now, ahead of its first tool call (a warm
    /// start); an existing one is left as it is. 409 when the session's agent has no sandbox.
    pub async fn provision(&self, caller: &Caller, session_id: &str) -> Result<Workspace> {
        let (session, workspaces) = self.sandboxed_session(caller, session_id).await?;
        let creator = &session.created_by.subject_id;
        let owner = SandboxOwner::new(crate::catalog::tenant_of(creator), creator.as_str());
        self.service.inner.signals.notify(session_id);
        let made = workspaces.provision(session_id, &owner).await;
        self.service.inner.signals.notify(session_id);
        let provisioned = made.map_err(|error| match error {
            SandboxError::QuotaExceeded { .. } | SandboxError::InvalidRequest(_) => ServiceError::Unprocessable(error.to_string()),
            other => workspace_error(session_id, other),
        })?;
        downloads::link(self.service.stores().settings.as_ref(), session_id, creator, &provisioned.sandbox_id).await?;
        workspaces.report(session_id, &FilesQuery::default()).await.map_err(|error| workspace_error(session_id, error))
    }

    /// Destroys the workspace of the caller's session: a command running in it is killed first
    /// (its call ends with an error), its files are gone, and the session goes on; its next tool
    /// call makes a fresh one. 409 when the session's agent has no sandbox.
    pub async fn destroy(&self, caller: &Caller, session_id: &str) -> Result<Workspace> {
        let (_, workspaces) = self.sandboxed_session(caller, session_id).await?;
        let destroyed = workspaces.destroy(session_id).await;
        self.service.inner.signals.notify(session_id);
        destroyed.map_err(|error| workspace_error(session_id, error))?;
        workspaces.report(session_id, &FilesQuery::default()).await.map_err(|error| workspace_error(session_id, error))
    }

    /// The status of the workspace of a session the caller has read (`session`, as
    /// [`Catalog::owned_session`](crate::Catalog::owned_session) gave it), for its live
    /// channels: the provider's answer alone (a session whose agent has no sandbox never has
    /// one, so it reads `none`), with no further read on this path, which every re-read of a
    /// followed session takes.
    pub async fn status(&self, session: &SessionRecord) -> Result<Standing> {
        let Some(workspaces) = self.service.sandboxes().workspaces() else { return Ok(Standing::default()) };
        workspaces.status(&session.id).await.map_err(|error| workspace_error(&session.id, error))
    }

    /// The caller's session, its agent's spec, and the workspaces its sandbox is among when the
    /// agent has one and this server runs sandboxes.
    async fn lookup(&self, caller: &Caller, session_id: &str) -> Result<(SessionRecord, AgentSpec, Option<Arc<Workspaces>>)> {
        let session = self.service.catalog().owned_session(caller, session_id).await?;
        let spec = self.service.catalog().session_spec(&session).await?;
        let workspaces = wanted(&spec).and(self.service.sandboxes().workspaces()).cloned();
        Ok((session, spec, workspaces))
    }

    /// Like [`SessionWorkspaces::lookup`], refusing a session without a sandbox (409) and one
    /// this server cannot run (422).
    async fn sandboxed_session(&self, caller: &Caller, session_id: &str) -> Result<(SessionRecord, Arc<Workspaces>)> {
        let (session, spec, workspaces) = self.lookup(caller, session_id).await?;
        if wanted(&spec).is_none() {
            return Err(ServiceError::Conflict {
                code: "no_sandbox",
                message: "the session's agent has no sandbox, so it has no workspace (config.sandbox.enabled)".to_owned(),
            });
        }
        self.service.sandboxes().check(&spec)?;
        let workspaces = workspaces.ok_or_else(|| ServiceError::Unprocessable("this server runs no sandboxes".to_owned()))?;
        Ok((session, workspaces))
    }
}

/// A provider's failure as the API says it: a bad listing path is the caller's (400, 404),
/// anything else the provider's (502, logged).
fn workspace_error(session_id: &str, error: SandboxError) -> ServiceError {
    match error {
        SandboxError::InvalidPath { .. } => ServiceError::invalid_param("path", error.to_string()),
        SandboxError::NoSuchFile(_) => ServiceError::NotFound(error.to_string()),
        other => {
            tracing::warn!(session_id, error = %other, "a session's workspace could not be served");
            ServiceError::Upstream(format!("the workspace could not be served: {other}"))
        }
    }
}
