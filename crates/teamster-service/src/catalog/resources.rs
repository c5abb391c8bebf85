//! Resources: what a session is about (the application's id for a user, a repository, a
//! ticket). A session names one at creation or by `PATCH`; a caller lists its sessions of a
//! resource and the resources of its sessions, and creating a session may answer the
//! resource's latest one instead ("select or create").

use teamster_protocol::api::Resource;
use teamster_protocol::{AgentSpec, Session, ids};
use teamster_store::{SessionAgentRecord, SessionOrder, SessionQuery};

use super::sessions::{check_resource_id, session_view, validate_title};
use super::Catalog;
use crate::Caller;
use crate::error::{Result, ServiceError};

/// The most resources a listing shows.
pub const MAX_LISTED_RESOURCES: u32 = 100;

/// The agent a new native session runs.
#[derive(Clone, Debug)]
pub enum NewSessionAgent {
    /// A saved agent, by name.
    Saved(String),
    /// A spec of its own.
    Spec(Box<AgentSpec>),
}

/// A native session to create.
#[derive(Clone, Debug)]
pub struct NewSession {
    pub agent: NewSessionAgent,
    pub title: Option<String>,
    pub resource_id: Option<String>,
    /// Answer the resource's latest session of the same saved agent, when there is one,
    /// instead of a new session.
    pub reuse_latest: bool,
}

/// The caller's resources, and sessions made about one ([`Catalog::resources`]).
pub struct Resources<'a> {
    pub(super) catalog: &'a Catalog,
}

impl Resources<'_> {
    /// Creates a native session, or with `reuse_latest` finds the resource's latest session of
    /// the same saved agent; answers the session and whether it is new.
    pub async fn create_or_reuse_session(&self, caller: &Caller, new: NewSession) -> Result<(Session, bool)> {
        validate_title(&new.title)?;
        if let Some(resource_id) = &new.resource_id {
            check_resource_id(resource_id)?;
            if resource_id.is_empty() {
                return Err(ServiceError::invalid_param("resource_id", "resource_id is empty"));
            }
        }
        if new.reuse_latest {
            let Some(resource_id) = &new.resource_id else {
                return Err(ServiceError::invalid_param("resource_id", "reuse_latest needs the resource_id whose latest session to answer"));
            };
            let NewSessionAgent::Saved(agent_name) = &new.agent else {
                return Err(ServiceError::invalid_param("agent", "reuse_latest needs a saved agent (agent: {\"name\": ...})"));
            };
            if let Some(latest) = self.latest(caller, resource_id, agent_name).await? {
                return Ok((latest, false));
            }
        }
        let created = match new.agent {
            NewSessionAgent::Saved(agent_name) => {
                self.catalog.insert_saved_session(caller, ids::new_id("sess"), &agent_name, new.title, new.resource_id).await?
            }
            NewSessionAgent::Spec(spec) => self.catalog.insert_draft_session(caller, *spec, None, new.title, new.resource_id).await?,
        };
        Ok((created, true))
    }

    /// The caller's most recently updated session about `resource_id` that runs the saved
    /// agent `agent_name`.
    async fn latest(&self, caller: &Caller, resource_id: &str, agent_name: &str) -> Result<Option<Session>> {
        let query = SessionQuery {
            created_by: Some(caller.subject.subject_id.clone()),
            resource_id: Some(resource_id.to_owned()),
            agent_name: Some(agent_name.to_owned()),
            order_by: SessionOrder::UpdatedAt,
            descending: true,
            limit: 1,
            ..SessionQuery::default()
        };
        let latest = self.catalog.sessions.list_sessions(&query).await?.into_iter().next();
        Ok(latest.filter(|record| matches!(record.agent, SessionAgentRecord::Saved { .. })).map(session_view))
    }

    /// The resources the caller's sessions are about, the latest updated first.
    pub async fn list(&self, caller: &Caller, limit: u32) -> Result<Vec<Resource>> {
        let resources = self.catalog.sessions.list_resources(&caller.subject.subject_id, limit.clamp(1, MAX_LISTED_RESOURCES)).await?;
        Ok(resources
            .into_iter()
            .map(|resource| Resource { resource_id: resource.resource_id, session_count: resource.sessions, updated_at: resource.updated_at })
            .collect())
    }
}
