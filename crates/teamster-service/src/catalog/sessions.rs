//! Sessions: create (from a saved agent or with their own spec), get, update, delete, list.

use std::collections::BTreeMap;

use teamster_protocol::agent::AgentSpec;
use teamster_control::{StateError, StateSchema};
use teamster_protocol::control::{Grant, PermissionPolicy, SessionControl};
use teamster_protocol::session::{Session, SessionAgent, SessionKind};
use teamster_protocol::{ids, timestamp};
use teamster_store::{SessionAgentRecord, SessionOrder, SessionQuery, SessionRecord};

use crate::cursor;
use crate::error::{Result, ServiceError};
use super::Catalog;
use super::agents::AgentAccess;
use crate::Caller;

/// A caller's value in an error message: at most 64 characters of it.
fn short(value: &str) -> String {
    value.chars().take(64).collect()
}

/// For an admin (a tenant admin, or the operator in its own tenant), what the ids of its tenant's subjects start with (`<tenant>:<name>`, as API
/// keys and OIDC logins make them); `None` for anyone else.
fn tenant_prefix(caller: &Caller) -> Option<String> {
    (caller.is_tenant_admin() && !caller.tenant.is_empty()).then(|| format!("{}:", caller.tenant))
}

/// The longest title a session may have, in bytes.
const MAX_TITLE_BYTES: usize = 512;

pub(crate) fn session_view(record: SessionRecord) -> Session {
    let (agent_name, agent_spec, agent) = match record.agent {
        SessionAgentRecord::Saved { agent_id, agent_name, version } => (
            Some(agent_name.clone()),
            None,
            SessionAgent::Reference { id: agent_id, name: Some(agent_name), version },
        ),
        SessionAgentRecord::Draft { spec, agent_name } => {
            (agent_name, Some(spec.clone()), SessionAgent::Inline { spec })
        }
    };
    let kind = if agent_spec.is_some() { SessionKind::Draft } else { SessionKind::Saved };
    Session {
        kind,
        id: record.id,
        agent_name,
        agent_spec,
        agent,
        title: record.title,
        created_by: record.created_by.subject_id.clone(),
        created_by_subject: record.created_by,
        created_at: record.created_at,
        updated_at: record.updated_at,
        preview: None,
        resource_id: record.resource_id,
        control: record.control,
    }
}

/// What an update of a session changes; `None` fields are kept.
#[derive(Clone, Debug, Default)]
pub struct SessionUpdate {
    /// A new spec, for sessions with their own.
    pub spec: Option<AgentSpec>,
    pub title: Option<String>,
    /// One of the agent's modes.
    pub mode: Option<String>,
    /// A `provider/model` for the following turns; empty for the agent's (or the mode's).
    pub model: Option<String>,
    /// The `provider/model` of declared sub-agents, by name; empty for the declaration's.
    pub subagent_models: Option<BTreeMap<String, String>>,
    /// The session's permission policy, replacing the one it had.
    pub permissions: Option<PermissionPolicy>,
    /// A JSON merge patch of the session state (checked against the agent's `state_schema`).
    pub state: Option<serde_json::Value>,
    /// The resource the session is about; empty to remove it.
    pub resource_id: Option<String>,
}

/// The most tool names a session's permission policy names.
const MAX_POLICY_TOOLS: usize = 256;

/// Which sessions a listing may show.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SessionScope {
    /// The caller's own sessions.
    #[default]
    Own,
    /// What the caller may see of others' sessions too (the gateway's session search): its
    /// own, and the sessions of the saved agents it manages; an admin sees every session of
    /// its tenant's subjects.
    Visible,
}

/// A dialect-neutral session listing. Timestamps are already normalised RFC 3339.
#[derive(Clone, Debug, Default)]
pub struct SessionListQuery {
    pub scope: SessionScope,
    pub agent_name: Option<String>,
    pub agent_id: Option<String>,
    pub kind: Option<SessionKind>,
    pub session_id: Option<String>,
    pub created_by_subject_id: Option<String>,
    /// Only the sessions about this resource.
    pub resource_id: Option<String>,
    pub created_from: Option<String>,
    pub created_to: Option<String>,
    pub order_by: SessionOrder,
    pub descending: bool,
    pub page_token: Option<String>,
    pub limit: u32,
}

/// The longest resource id, in characters.
pub const MAX_RESOURCE_ID_CHARS: usize = 256;
/// Checks a resource id: 1 to 256 characters, none of them control characters (an empty one,
/// in a `PATCH`, removes the session's).
pub(crate) fn check_resource_id(resource_id: &str) -> Result<()> {
    let problem = if resource_id.chars().count() > MAX_RESOURCE_ID_CHARS {
        Some(format!("resource_id is longer than {MAX_RESOURCE_ID_CHARS} characters"))
    } else if resource_id.chars().any(char::is_control) {
        Some("resource_id holds a control character".to_owned())
    } else if !resource_id.is_empty() && resource_id.trim().is_empty() {
        Some("resource_id is blank".to_owned())
    } else {
        None
    };
    match problem {
        Some(message) => Err(ServiceError::invalid_param("resource_id", message)),
        None => Ok(()),
    }
}

pub(crate) fn validate_title(title: &Option<String>) -> Result<()> {
    if title.as_ref().is_some_and(|title| title.len() > MAX_TITLE_BYTES) {
        return Err(ServiceError::invalid_param("title", format!("title is longer than {MAX_TITLE_BYTES} bytes")));
    }
    Ok(())
}

impl Catalog {
    /// A session of a saved agent, pinned to the agent's current version.
    pub async fn create_session(&self, caller: &Caller, agent_name: &str, title: Option<String>) -> Result<Session> {
        validate_title(&title)?;
        self.insert_saved_session(caller, ids::new_id("sess"), agent_name, title, None).await
    }

    /// A session of a saved agent under an id the client chose (an AI SDK chat id); a conflict
    /// when the id is taken.
    pub async fn create_session_with_id(&self, caller: &Caller, id: &str, agent_name: &str) -> Result<Session> {
        if !ids::is_valid_id(id) {
            return Err(ServiceError::invalid_param("id", "a session id is 1 to 128 characters of [A-Za-z0-9._~-]"));
        }
        self.insert_saved_session(caller, id.to_owned(), agent_name, None, None).await
    }

    /// A session of the saved agent `agent_name`, which the caller may use, pinned to its
    /// current version.
    pub(super) async fn insert_saved_session(
        &self,
        caller: &Caller,
        id: String,
        agent_name: &str,
        title: Option<String>,
        resource_id: Option<String>,
    ) -> Result<Session> {
        let agent = self.agent_by_name_for(caller, agent_name, AgentAccess::Use).await?;
        let agent = SessionAgentRecord::Saved { agent_id: agent.id, agent_name: agent.name, version: agent.version };
        self.insert_session(caller, id, agent, title, resource_id).await
    }

    /// A session that carries its own spec (a gateway draft, a native inline session).
    pub async fn create_draft_session(
        &self,
        caller: &Caller,
        spec: AgentSpec,
        agent_name: Option<String>,
        title: Option<String>,
    ) -> Result<Session> {
        validate_title(&title)?;
        self.insert_draft_session(caller, spec, agent_name, title, None).await
    }

    /// A session with a spec of its own (checked), linked to a saved agent the caller may use
    /// when `agent_name` names one.
    pub(super) async fn insert_draft_session(
        &self,
        caller: &Caller,
        spec: AgentSpec,
        agent_name: Option<String>,
        title: Option<String>,
        resource_id: Option<String>,
    ) -> Result<Session> {
        self.check_spec(&spec)?;
        if let Some(name) = &agent_name {
            self.agent_by_name_for(caller, name, AgentAccess::Use).await?;
        }
        self.insert_session(caller, ids::new_id("sess"), SessionAgentRecord::Draft { spec, agent_name }, title, resource_id).await
    }

    async fn insert_session(
        &self,
        caller: &Caller,
        id: String,
        agent: SessionAgentRecord,
        title: Option<String>,
        resource_id: Option<String>,
    ) -> Result<Session> {
        let now = timestamp::now();
        let record = SessionRecord {
            id,
            agent,
            title,
            created_by: caller.subject.clone(),
            created_at: now.clone(),
            updated_at: now,
            last_turn_id: None,
            control: SessionControl::default(),
            resource_id,
        };
        self.sessions.create_session(&record).await?;
        self.signals.notify_listed(&record.id, &record.created_by.subject_id);
        Ok(session_view(record))
    }

    /// The session record, if the caller may see it: another subject's session is not found,
    /// exactly as a missing one (no hint that it exists).
    pub async fn owned_session(&self, caller: &Caller, session_id: &str) -> Result<SessionRecord> {
        let not_found = || ServiceError::NotFound(format!("session {:?} not found", short(session_id)));
        let record = self.sessions.get_session(session_id).await.map_err(|error| match error {
            teamster_store::Error::NotFound(_) => not_found(),
            other => other.into(),
        })?;
        if record.created_by.subject_id != caller.subject.subject_id {
            return Err(not_found());
        }
        Ok(record)
    }

    pub async fn get_session(&self, caller: &Caller, session_id: &str) -> Result<Session> {
        Ok(session_view(self.owned_session(caller, session_id).await?))
    }

    /// A session the caller may read (the gateway's E3): its own, one of a saved agent the
    /// caller manages, or, for an admin, any of its tenant's subjects. Everything else about
    /// another's session (its turns, events, changes) stays its creator's alone.
    pub async fn get_visible_session(&self, caller: &Caller, session_id: &str) -> Result<Session> {
        let owned = self.owned_session(caller, session_id).await;
        let Err(ServiceError::NotFound(message)) = owned else { return owned.map(session_view) };
        let record = match self.sessions.get_session(session_id).await {
            Ok(record) => record,
            Err(teamster_store::Error::NotFound(_)) => return Err(ServiceError::NotFound(message)),
            Err(other) => return Err(other.into()),
        };
        if tenant_prefix(caller).is_some_and(|prefix| record.created_by.subject_id.starts_with(&prefix)) {
            return Ok(session_view(record));
        }
        let SessionAgentRecord::Saved { agent_id, .. } = &record.agent else { return Err(ServiceError::NotFound(message)) };
        match self.agents.get_agent(agent_id).await {
            Ok(agent) if super::agents::agent_access(caller, &agent) == AgentAccess::Manage => Ok(session_view(record)),
            Ok(_) | Err(teamster_store::Error::NotFound(_)) => Err(ServiceError::NotFound(message)),
            Err(other) => Err(other.into()),
        }
    }

    /// Updates a session. A new spec is only for sessions with their own spec; a mode must be
    /// one of the agent's and a model one this server has; `None` fields are kept. Nothing is
    /// changed unless all of it can be. An empty update just refreshes `updated_at`.
    pub async fn update_session(&self, caller: &Caller, session_id: &str, update: SessionUpdate) -> Result<Session> {
        let SessionUpdate { spec, title, mode, model, subagent_models, permissions, state, resource_id } = update;
        validate_title(&title)?;
        let resource_id = resource_id.map(|resource_id| check_resource_id(&resource_id).map(|()| resource_id)).transpose()?;
        // The control is written on its own, so a title or spec change never reverts a control
        // change made meanwhile from another request (nor the other way round).
        let controls = mode.is_some() || model.is_some() || subagent_models.is_some() || state.is_some() || permissions.is_some();
        let switched_model = model.as_deref().is_some_and(|model| !model.is_empty());
        let fields = spec.is_some() || title.is_some() || resource_id.is_some() || !controls;
        let mut record = self.owned_session(caller, session_id).await?;
        if let Some(spec) = spec {
            self.check_spec(&spec)?;
            match &mut record.agent {
                SessionAgentRecord::Draft { spec: current, .. } => *current = spec,
                SessionAgentRecord::Saved { .. } => {
                    return Err(ServiceError::Unprocessable(
                        "this session runs a saved agent; its agent cannot be replaced (update the agent instead)"
                            .to_owned(),
                    ));
                }
            }
        }
        if title.is_some() {
            record.title = title;
        }
        if let Some(resource_id) = resource_id {
            record.resource_id = Some(resource_id).filter(|resource_id| !resource_id.is_empty());
        }
        if mode.is_some() || model.is_some() || subagent_models.is_some() || state.is_some() {
            let spec = self.session_spec(&record).await?;
            if let Some(patch) = state {
                let schema = StateSchema::of(&spec)
                    .map_err(|error| ServiceError::Unprocessable(error.to_string()))?
                    .ok_or_else(|| ServiceError::invalid_param("state", StateError::NoState.to_string()))?;
                let patched = schema
                    .patched(record.control.state.as_ref(), &patch)
                    .map_err(|error| ServiceError::Unprocessable(error.to_string()))?;
                record.control.state = Some(patched);
            }
            if let Some(mode) = mode {
                if teamster_control::mode(&spec, &mode).is_none() {
                    let known = teamster_control::mode_ids(&spec);
                    return Err(ServiceError::invalid_param(
                        "mode",
                        match known.is_empty() {
                            true => format!("the session's agent has no modes, so there is no mode {:?}", short(&mode)),
                            false => format!("the session's agent has no mode {:?}; its modes: {known}", short(&mode)),
                        },
                    ));
                }
                record.control.mode = Some(mode);
            }
            if let Some(model) = model {
                record.control.model = match model.is_empty() {
                    true => None,
                    false => Some(self.check_model(&model)?),
                };
            }
            for (name, model) in subagent_models.into_iter().flatten() {
                if !spec.sub_agents.iter().flatten().any(|declared| declared.name == name) {
                    let declared: Vec<&str> = spec.sub_agents.iter().flatten().map(|declared| declared.name.as_str()).collect();
                    return Err(ServiceError::invalid_param(
                        "subagent_models",
                        match declared.is_empty() {
                            true => format!("the session's agent declares no sub-agents, so there is no {:?}", short(&name)),
                            false => format!("the session's agent declares no sub-agent {:?}; it declares: {}", short(&name), declared.join(", ")),
                        },
                    ));
                }
                match model.is_empty() {
                    true => record.control.subagent_models.remove(&name),
                    false => {
                        let model = self.check_model(&model).map_err(|error| match error {
                            ServiceError::Invalid { message, .. } => ServiceError::invalid_param("subagent_models", message),
                            other => other,
                        })?;
                        record.control.subagent_models.insert(name, model)
                    }
                };
            }
        }
        if let Some(permissions) = permissions {
            teamster_control::check_policy(&permissions.tools, MAX_POLICY_TOOLS)
                .map_err(|message| ServiceError::invalid_param("permissions", message))?;
            record.control.permissions = permissions;
        }
        record.updated_at = timestamp::now();
        if fields {
            self.sessions.update_session(&record).await?;
        }
        if controls {
            self.sessions.update_session_control(&record.id, &record.control, &record.updated_at).await?;
        }
        self.signals.notify_listed(session_id, &record.created_by.subject_id);
        if let Some(model) = record.control.model.as_deref().filter(|_| switched_model) {
            self.providers.count_use(&caller.tenant, model);
        }
        Ok(session_view(record))
    }

    /// The session state: as last changed, or the schema's defaults (400 for agents without a
    /// `state_schema`).
    pub async fn session_state(&self, caller: &Caller, session_id: &str) -> Result<serde_json::Value> {
        let record = self.owned_session(caller, session_id).await?;
        let spec = self.session_spec(&record).await?;
        let schema = StateSchema::of(&spec)
            .map_err(|error| ServiceError::Unprocessable(error.to_string()))?
            .ok_or_else(|| ServiceError::invalid("the session's agent declares no state_schema"))?;
        Ok(record.control.state.unwrap_or_else(|| schema.initial().clone()))
    }

    /// The tools and categories the session's user allowed for the rest of the session.
    pub async fn session_grants(&self, caller: &Caller, session_id: &str) -> Result<Vec<Grant>> {
        Ok(self.owned_session(caller, session_id).await?.control.grants)
    }

    /// Revokes a grant: the tool (or category) asks again from the next turn on.
    pub async fn revoke_grant(&self, caller: &Caller, session_id: &str, grant_id: &str) -> Result<()> {
        let mut record = self.owned_session(caller, session_id).await?;
        let before = record.control.grants.len();
        record.control.grants.retain(|grant| grant.id != grant_id);
        if record.control.grants.len() == before {
            return Err(ServiceError::NotFound(format!("grant {:?} not found in this session", short(grant_id))));
        }
        self.sessions.update_session_control(session_id, &record.control, &timestamp::now()).await?;
        self.signals.notify(session_id);
        Ok(())
    }

    /// One page of sessions and the token of the next page, if any.
    pub async fn list_sessions(&self, caller: &Caller, query: SessionListQuery) -> Result<(Vec<Session>, Option<String>)> {
        let (or_of_agents, or_created_by_prefix) = match query.scope {
            SessionScope::Own => (Vec::new(), None),
            SessionScope::Visible => (self.managed_agent_ids(caller).await?, tenant_prefix(caller)),
        };
        if or_of_agents.is_empty()
            && or_created_by_prefix.is_none()
            && let Some(requested) = &query.created_by_subject_id
            && *requested != caller.subject.subject_id
        {
            return Ok((Vec::new(), None));
        }
        let after = match &query.page_token {
            Some(token) => {
                let mut parts = cursor::decode(token, 2)?;
                let id = parts.pop().unwrap_or_default();
                let key = parts.pop().unwrap_or_default();
                Some((key, id))
            }
            None => None,
        };
        let store_query = SessionQuery {
            created_by: query.created_by_subject_id,
            visible_to: Some(caller.subject.subject_id.clone()),
            or_of_agents,
            or_created_by_prefix,
            agent_name: query.agent_name,
            agent_id: query.agent_id,
            kind: query.kind,
            session_id: query.session_id,
            resource_id: query.resource_id,
            created_from: query.created_from,
            created_to: query.created_to,
            order_by: query.order_by,
            descending: query.descending,
            after,
            limit: query.limit + 1,
        };
        let mut records = self.sessions.list_sessions(&store_query).await?;
        let next = if records.len() > query.limit as usize {
            records.truncate(query.limit as usize);
            records.last().map(|last| {
                let key = match query.order_by {
                    SessionOrder::CreatedAt => &last.created_at,
                    SessionOrder::UpdatedAt => &last.updated_at,
                };
                cursor::encode(&[key, &last.id])
            })
        } else {
            None
        };
        Ok((records.into_iter().map(session_view).collect(), next))
    }
}
