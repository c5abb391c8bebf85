//! The catalog: what the service stores and hands out by name, apart from turns — saved agents
//! and their versions, sessions (and who may use them), and the model providers whose registry
//! resolves agents' model names. Its state is the provider registry in force; everything else
//! is read from the store on each use.

mod agents;
mod model_uses;
mod providers;
mod resources;
mod sessions;

use std::sync::Arc;

use teamster_llm::registry::{ModelRegistry, RegistryOptions};
use teamster_protocol::agent::AgentSpec;
use teamster_protocol::settings::{CurrentModel, ModelProviderManifest};
use teamster_store::{AgentStore, SessionAgentRecord, SessionRecord, SessionStore, StoreParts};

use crate::Caller;
use crate::error::{Result, ServiceError};
use teamster_sealed::SealedSettings;

pub use providers::{ModelProviders, ProviderWrite};
pub(crate) use providers::SETTING_KIND;
pub use resources::{MAX_LISTED_RESOURCES, NewSession, NewSessionAgent, Resources};
pub use sessions::MAX_RESOURCE_ID_CHARS;
pub use sessions::{SessionListQuery, SessionScope, SessionUpdate};
pub(crate) use agents::tenant_of;
pub(crate) use sessions::{session_view, validate_title};

/// Agents, sessions and model providers.
pub struct Catalog {
    agents: Arc<dyn AgentStore>,
    sessions: Arc<dyn SessionStore>,
    /// The model providers in force.
    providers: ModelProviders,
    /// Whether specs may ask for a sandbox.
    sandboxes: crate::Sandboxes,
    /// Wakes the live channels of the sessions it changes.
    signals: Arc<crate::signals::SessionSignals>,
    /// The MCP host, whose configured servers saved agents may name (set once it has started).
    mcp: std::sync::OnceLock<Arc<teamster_mcp_host::McpHost>>,
    /// The server's turn timeout, which an agent's own (`config.timeout_seconds`) may not pass.
    turn_timeout: std::time::Duration,
}

impl Catalog {
    /// Loads the providers in force: `env_providers`, overridden by the stored ones.
    pub(crate) async fn load(
        stores: &StoreParts,
        env_providers: Vec<ModelProviderManifest>,
        model_options: RegistryOptions,
        sandboxes: crate::Sandboxes,
        sealed: SealedSettings,
        signals: Arc<crate::signals::SessionSignals>,
        turn_timeout: std::time::Duration,
    ) -> Result<Catalog> {
        let providers = ModelProviders::load(stores.settings.clone(), stores.usage.clone(), sealed, env_providers, model_options).await?;
        Ok(Catalog {
            agents: stores.agents.clone(),
            sessions: stores.sessions.clone(),
            providers,
            sandboxes,
            signals,
            mcp: std::sync::OnceLock::new(),
            turn_timeout,
        })
    }

    /// Lets saving an agent check the MCP servers it names against `mcp`'s.
    pub(crate) fn check_servers_with(&self, mcp: &Arc<teamster_mcp_host::McpHost>) {
        let _first = self.mcp.set(mcp.clone());
    }

    /// What the caller's sessions are about: listing resources, selecting or creating a
    /// resource's session.
    pub fn resources(&self) -> Resources<'_> {
        Resources { catalog: self }
    }

    /// The model providers in force.
    pub fn providers(&self) -> &ModelProviders {
        &self.providers
    }

    /// The registry that resolves `provider/model` names, as configured now.
    pub(crate) fn models(&self) -> Arc<ModelRegistry> {
        self.providers.registry()
    }

    /// The spec a session runs: its draft spec, or its saved agent's pinned version
    /// ([`ServiceError::PreconditionFailed`] once that agent was deleted).
    pub(crate) async fn session_spec(&self, session: &SessionRecord) -> Result<AgentSpec> {
        match &session.agent {
            SessionAgentRecord::Draft { spec, .. } => Ok(spec.clone()),
            SessionAgentRecord::Saved { agent_id, agent_name, version } => {
                let read = self.agents.get_agent_version(agent_id, *version).await;
                read.map(|agent| agent.spec).map_err(|error| agent_gone(error, agent_name, *version))
            }
        }
    }

    /// The spec one of the caller's sessions runs (its pinned agent version, or its own for a
    /// draft), as its next turn would check it.
    pub async fn spec_of_session(&self, caller: &Caller, session_id: &str) -> Result<AgentSpec> {
        let session = self.owned_session(caller, session_id).await?;
        self.checked_spec(caller, &session).await
    }

    /// The model one of the caller's sessions runs its next turn on, what chose it, whether it
    /// can be called as configured, and its catalog entry.
    pub async fn current_model(&self, caller: &Caller, session_id: &str) -> Result<CurrentModel> {
        let session = self.owned_session(caller, session_id).await?;
        let spec = self.checked_spec(caller, &session).await?;
        let mode_model = teamster_control::mode_in_force(&spec, session.control.mode.as_deref()).and_then(|mode| mode.model.clone());
        let (name, selected_by) = match (session.control.model.clone(), mode_model) {
            (Some(model), _) => (model, "session"),
            (None, Some(model)) => (model, "mode"),
            (None, None) => (spec.model.name.clone(), "agent"),
        };
        let model = self.providers.available(&caller.tenant).await?.into_iter().find(|model| model.name == name);
        Ok(CurrentModel { has_auth: model.as_ref().is_some_and(|model| model.has_auth), selected_by: selected_by.to_owned(), name, model })
    }

    /// The caller's session, which it may still run (what queueing a message needs).
    pub(crate) async fn runnable_session(&self, caller: &Caller, session_id: &str) -> Result<SessionRecord> {
        let session = self.owned_session(caller, session_id).await?;
        self.checked_spec(caller, &session).await?;
        Ok(session)
    }

    /// The spec a session runs ([`Catalog::session_spec`]), once `caller` is known to be
    /// allowed to run it still: the session's agent and the saved agents the spec declares as
    /// sub-agents (404 or 403, as for a new session). A caller acting outside any request (a
    /// queued follow-up starting, with no tenant) was checked when the message was queued.
    ///
    /// The access check reads the agent's latest version; when the session is pinned to that
    /// version, which is the usual case, that one read is also the spec.
    async fn checked_spec(&self, caller: &Caller, session: &SessionRecord) -> Result<AgentSpec> {
        let spec = match &session.agent {
            SessionAgentRecord::Saved { agent_id, agent_name, version } if !caller.tenant.is_empty() => {
                let latest = self.agents.get_agent(agent_id).await.map_err(|error| agent_gone(error, agent_name, *version))?;
                agents::check_access(caller, &latest, agents::AgentAccess::Use, agent_id)?;
                if latest.version == *version { latest.spec } else { self.session_spec(session).await? }
            }
            _ => self.session_spec(session).await?,
        };
        if !caller.tenant.is_empty() {
            for name in spec.sub_agents.iter().flatten().filter_map(|declared| declared.agent.as_deref()) {
                self.agent_by_name_for(caller, name, agents::AgentAccess::Use).await?;
            }
        }
        Ok(spec)
    }

    /// The spec a session runs, checked before `caller` stores a turn: its pinned version
    /// exists (412 once the agent was deleted), the caller may still run it
    /// ([`Catalog::checked_spec`]) and its model resolves (422).
    pub(crate) async fn runnable_spec(&self, caller: &Caller, session: &SessionRecord) -> Result<AgentSpec> {
        let spec = self.checked_spec(caller, session).await?;
        let model = teamster_control::agent_in_mode(&spec, &session.control).model.name;
        match self.models().resolve(&model) {
            Ok(_) => Ok(spec),
            Err(error) => {
                Err(ServiceError::Unprocessable(format!("the session's model {model:?} is not available: {error}")))
            }
        }
    }
}

/// The error for a session whose saved agent (pinned at `version`) cannot be read: 412 once it
/// was deleted.
fn agent_gone(error: teamster_store::Error, agent_name: &str, version: u64) -> ServiceError {
    match error {
        teamster_store::Error::NotFound(_) => ServiceError::PreconditionFailed(format!(
            "the session's agent {agent_name:?} (version {version}) was deleted; start a new session"
        )),
        other => other.into(),
    }
}
