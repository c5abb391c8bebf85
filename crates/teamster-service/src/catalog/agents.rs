//! Saved agents: create, update (a new immutable version), get, list, delete.

use teamster_protocol::agent::{Agent, AgentSpec, is_valid_resource_name};
use teamster_protocol::{RuntimeConfig, ids, timestamp};
use teamster_store::AgentRecord;

use crate::error::{Result, ServiceError};
use super::Catalog;

pub(crate) fn agent_view(record: AgentRecord) -> Agent {
    Agent {
        id: record.id,
        name: record.name,
        manifest: record.spec,
        version: record.version,
        created_at: record.created_at,
        updated_at: record.updated_at,
    }
}

/// The longest model name accepted (`provider/model`).
const MAX_MODEL_NAME_BYTES: usize = 256;

/// Checks a spec against what this server can run. Shape errors are 400; features the server
/// does not provide yet are 422.
fn validate_spec(spec: &AgentSpec) -> Result<()> {
    if spec.model.name.len() > MAX_MODEL_NAME_BYTES {
        return Err(ServiceError::invalid_param(
            "model.name",
            format!("model names are at most {MAX_MODEL_NAME_BYTES} bytes, of the form provider/model"),
        ));
    }
    if spec.model.provider_and_model().is_none() {
        return Err(ServiceError::invalid_param(
            "model.name",
            format!("model name {:?} must have the form provider/model", spec.model.name),
        ));
    }
    if let Some(limit) = spec.config.as_ref().and_then(|config| config.iteration_limit)
        && (limit == 0 || limit > RuntimeConfig::MAX_ITERATION_LIMIT) {
            return Err(ServiceError::invalid_param(
                "config.iteration_limit",
                format!("iteration_limit must be between 1 and {}", RuntimeConfig::MAX_ITERATION_LIMIT),
            ));
        }
    if let Some(budget) = spec.config.as_ref().and_then(|config| config.budget.as_ref()) {
        check_budget(budget)?;
    }
    if let Some(servers) = &spec.mcp_servers {
        crate::mcp::validate_agent_servers(servers)?;
    }
    teamster_control::check_modes(spec).map_err(|message| ServiceError::invalid_param("modes", message))?;
    let state = teamster_control::StateSchema::of(spec).map_err(|error| ServiceError::invalid_param("state_schema", error.to_string()))?;
    if state.is_none() && spec.config.as_ref().and_then(|config| config.state_tool.as_ref()).is_some_and(|tool| tool.enabled) {
        return Err(ServiceError::invalid_param("config.state_tool", "the state tools need a state_schema"));
    }
    for mode in spec.modes.iter().flatten() {
        if let Some(servers) = &mode.additional_tools {
            crate::mcp::validate_agent_servers(servers)?;
        }
    }
    crate::sandboxes::validate_skills(spec)
}

impl Catalog {
    /// Checks a spec's shape and that its model's provider is configured here (a provider
    /// added later can be named only once it exists; a session of an agent whose provider is
    /// removed fails its turns, saying so).
    pub(crate) fn check_spec(&self, spec: &AgentSpec) -> Result<()> {
        validate_spec(spec)?;
        self.sandboxes.check(spec)?;
        self.check_provider("model.name", &spec.model.name)?;
        for mode in spec.modes.iter().flatten() {
            if let Some(model) = &mode.model {
                self.check_provider("modes", model)?;
            }
        }
        Ok(())
    }

    /// Checks that a model a caller names for a session's next turns is one this server has
    /// (the error names the provider's models, or the providers); returns it.
    pub(crate) fn check_model(&self, model: &str) -> Result<String> {
        if model.len() > MAX_MODEL_NAME_BYTES || !model.split_once('/').is_some_and(|(provider, name)| !provider.is_empty() && !name.is_empty()) {
            return Err(ServiceError::invalid_param(
                "model",
                format!("a model is named provider/model, in at most {MAX_MODEL_NAME_BYTES} bytes"),
            ));
        }
        self.check_provider("model", model)?;
        match self.models().resolve(model) {
            Ok(_) => Ok(model.to_owned()),
            Err(error) => Err(ServiceError::invalid_param("model", format!("the model {model:?} is not available: {error}"))),
        }
    }

    /// Refuses (400, about `param`) a model whose provider is not configured here.
    fn check_provider(&self, param: &'static str, model: &str) -> Result<()> {
        if let Err(teamster_llm::registry::ResolveError::UnknownProvider { provider, mut known }) = self.models().resolve(model) {
            known.sort();
            return Err(ServiceError::invalid_param(
                param,
                format!(
                    "there is no model provider named {provider:?}; configured providers: {}. Add it first \
                     (PUT /settings/model-providers or the environment)",
                    known.join(", ")
                ),
            ));
        }
        Ok(())
    }

    pub async fn create_agent(&self, name: &str, spec: AgentSpec) -> Result<Agent> {
        if !is_valid_resource_name(name) {
            return Err(ServiceError::invalid_param(
                "name",
                format!("agent name {name:?} must be 2-64 characters of a-z, 0-9, '.', '_' or '-', starting with a letter and ending with a letter or digit"),
            ));
        }
        self.check_spec(&spec)?;
        let now = timestamp::now();
        let record = AgentRecord {
            id: ids::new_id("agent"),
            name: name.to_owned(),
            version: 1,
            spec,
            created_at: now.clone(),
            updated_at: now,
        };
        self.store().create_agent(&record).await.map_err(|error| match error {
            teamster_store::Error::Conflict(_) => ServiceError::Conflict {
                code: "already_exists",
                message: format!("an agent named {name:?} already exists"),
            },
            other => other.into(),
        })?;
        Ok(agent_view(record))
    }

    /// Stores a new version of an agent; sessions already started keep their version. A spec
    /// equal to the latest version's stores nothing and answers that version.
    pub async fn update_agent(&self, agent_id: &str, spec: AgentSpec) -> Result<Agent> {
        self.check_spec(&spec)?;
        let latest = self.agent_record(agent_id).await?;
        if latest.spec == spec {
            return Ok(agent_view(latest));
        }
        let record = self
            .store()
            .add_agent_version(&latest.id, &spec, &timestamp::now())
            .await
            .map_err(|error| not_found_agent(error, agent_id))?;
        Ok(agent_view(record))
    }

    /// Creates the agent, or adds a version when the name exists (what `agents apply` does).
    pub async fn apply_agent(&self, name: &str, spec: AgentSpec) -> Result<Agent> {
        match self.store().get_agent_by_name(name).await {
            Ok(existing) => self.update_agent(&existing.id, spec).await,
            Err(teamster_store::Error::NotFound(_)) => self.create_agent(name, spec).await,
            Err(other) => Err(other.into()),
        }
    }

    /// An agent by id, or by name (ids and names look alike, so the id is tried first).
    pub async fn get_agent(&self, agent_id: &str) -> Result<Agent> {
        Ok(agent_view(self.agent_record(agent_id).await?))
    }

    async fn agent_record(&self, id_or_name: &str) -> Result<AgentRecord> {
        match self.store().get_agent(id_or_name).await {
            Err(teamster_store::Error::NotFound(_)) if is_valid_resource_name(id_or_name) => {
                self.store().get_agent_by_name(id_or_name).await.map_err(|error| not_found_agent(error, id_or_name))
            }
            other => other.map_err(|error| not_found_agent(error, id_or_name)),
        }
    }

    pub async fn get_agent_by_name(&self, name: &str) -> Result<Agent> {
        let record = self.store().get_agent_by_name(name).await.map_err(|error| match error {
            teamster_store::Error::NotFound(_) => ServiceError::NotFound(format!("agent {name:?} not found")),
            other => other.into(),
        })?;
        Ok(agent_view(record))
    }

    pub async fn list_agents(&self) -> Result<Vec<Agent>> {
        Ok(self.store().list_agents().await?.into_iter().map(agent_view).collect())
    }

    /// Deletes an agent, named by id or name; idempotent.
    pub async fn delete_agent(&self, agent_id: &str) -> Result<()> {
        match self.agent_record(agent_id).await {
            Ok(record) => {
                self.store().delete_agent(&record.id).await?;
                Ok(())
            }
            Err(ServiceError::NotFound(_)) => Ok(()),
            Err(other) => Err(other),
        }
    }
}

fn not_found_agent(error: teamster_store::Error, agent_id: &str) -> ServiceError {
    match error {
        teamster_store::Error::NotFound(_) => ServiceError::NotFound(format!("no agent has the id or name {agent_id:?}")),
        other => other.into(),
    }
}

/// A session budget spends something: a positive token count, a positive finite cost.
fn check_budget(budget: &teamster_protocol::agent::Budget) -> Result<()> {
    if budget.max_tokens == Some(0) {
        return Err(ServiceError::invalid_param("config.budget.max_tokens", "max_tokens must be at least 1"));
    }
    if let Some(cost) = budget.max_cost_usd
        && !(cost.is_finite() && cost > 0.0)
    {
        return Err(ServiceError::invalid_param("config.budget.max_cost_usd", "max_cost_usd must be a positive number of US dollars"));
    }
    Ok(())
}
