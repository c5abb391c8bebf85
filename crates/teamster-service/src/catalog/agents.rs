//! Saved agents: create, update (a new immutable version), get, list, delete, and who may do
//! which of these.
//!
//! An agent belongs to its creator's tenant, and its name is unique within that tenant only: a
//! name always resolves within the caller's tenant (or, for a turn's saved sub-agents, the
//! session creator's), so no tenant learns which names another uses. Within that tenant its creator and the tenant's
//! admins may do everything; its collaborators (the spec's `collaborators`) see it, and may run
//! it (`agent-user`) or also edit, delete and re-share it (`agent-manager`). Anyone else,
//! in the tenant or not, is told the agent does not exist (404, exactly as for a missing one);
//! a collaborator refused an action is told so (403). Without authentication the one local
//! caller is the operator, an admin of the tenant `local`, which every agent stored before agents had owners
//! belongs to, so everything is as it was.

use teamster_protocol::agent::{Agent, AgentSpec, McpServerSource, StopWhen, is_valid_resource_name};
use teamster_protocol::collaborator::{AgentRole, CollaboratorSubject};
use teamster_protocol::{RuntimeConfig, ids, timestamp};
use teamster_store::AgentRecord;

use crate::error::{Result, ServiceError};
use crate::Caller;
use super::Catalog;

pub(crate) fn agent_view(record: AgentRecord) -> Agent {
    Agent {
        id: record.id,
        name: record.name,
        manifest: record.spec,
        version: record.version,
        created_at: record.created_at,
        updated_at: record.updated_at,
        tenant: Some(record.tenant),
        created_by_subject: record.created_by,
    }
}

/// What a caller may do with an agent, from least to most.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum AgentAccess {
    /// Nothing: the agent is not shown at all.
    Hidden,
    /// See it and run it (an `agent-user`).
    Use,
    /// Everything (its creator, a tenant admin, an `agent-manager`).
    Manage,
}

/// The tenant of a subject id as API keys and OIDC logins make them (`<tenant>:<name>`); the
/// local user's (`local`, no tenant in its id) is the tenant `local`.
pub(crate) fn tenant_of(subject_id: &str) -> &str {
    subject_id.split_once(':').map_or("local", |(tenant, _)| tenant)
}

/// What `caller` may do with `record`.
pub(crate) fn agent_access(caller: &Caller, record: &AgentRecord) -> AgentAccess {
    if caller.tenant != record.tenant {
        return AgentAccess::Hidden;
    }
    let creator = record.created_by.as_ref().is_some_and(|subject| subject.subject_id == caller.subject.subject_id);
    if caller.is_tenant_admin() || creator {
        return AgentAccess::Manage;
    }
    let granted = record.spec.collaborators.iter().flatten().filter_map(|collaborator| {
        let names_caller = match collaborator.named()? {
            CollaboratorSubject::User(name) => name == caller.subject.subject_slug,
            CollaboratorSubject::Team(tenant) => tenant == caller.tenant,
        };
        names_caller.then(|| collaborator.role()).flatten()
    });
    match granted.max() {
        Some(AgentRole::Manager) => AgentAccess::Manage,
        Some(AgentRole::User) => AgentAccess::Use,
        None => AgentAccess::Hidden,
    }
}

/// The most collaborators an agent may have.
const MAX_COLLABORATORS: usize = 256;

/// Checks the spec's collaborators: a known role id and a `user:<name>` or `team:<name>`
/// subject each (400 otherwise, naming the entry).
fn validate_collaborators(spec: &AgentSpec) -> Result<()> {
    let collaborators = spec.collaborators.as_deref().unwrap_or_default();
    if collaborators.len() > MAX_COLLABORATORS {
        return Err(ServiceError::invalid_param("collaborators", format!("an agent has at most {MAX_COLLABORATORS} collaborators")));
    }
    for (index, collaborator) in collaborators.iter().enumerate() {
        if collaborator.named().is_none() {
            return Err(ServiceError::invalid_param(
                "collaborators",
                format!(
                    "collaborators[{index}].subject {:?} must be \"user:<name>\" or \"team:<tenant>\" (a name of letters, digits, '.', '_', '-' and '@')",
                    collaborator.subject.chars().take(64).collect::<String>()
                ),
            ));
        }
        if collaborator.role().is_none() {
            return Err(ServiceError::invalid_param(
                "collaborators",
                format!(
                    "collaborators[{index}].role_id {:?} is not a role; the roles are {:?} and {:?}",
                    collaborator.role_id.chars().take(64).collect::<String>(),
                    AgentRole::MANAGER_ID,
                    AgentRole::USER_ID
                ),
            ));
        }
    }
    Ok(())
}

/// The longest tool name a declared sub-agent's `stop_when` may give.
const MAX_TOOL_NAME_BYTES: usize = 128;

/// Checks the declared sub-agents' bounds: `max_iterations` in range, and a `stop_when` that
/// names a condition (a tool among the sub-agent's own, when it lists them).
fn validate_sub_agents(spec: &AgentSpec) -> Result<()> {
    let invalid = |message: String| ServiceError::invalid_param("sub_agents", message);
    for (index, declared) in spec.sub_agents.iter().flatten().enumerate() {
        if let Some(limit) = declared.max_iterations
            && (limit == 0 || limit > RuntimeConfig::MAX_ITERATION_LIMIT)
        {
            return Err(invalid(format!(
                "sub_agents[{index}].max_iterations must be between 1 and {}",
                RuntimeConfig::MAX_ITERATION_LIMIT
            )));
        }
        let Some(stop) = &declared.stop_when else { continue };
        if stop.tool_called.is_none() && stop.tool_calls.is_none() {
            return Err(invalid(format!("sub_agents[{index}].stop_when needs tool_called, tool_calls or both")));
        }
        if let Some(calls) = stop.tool_calls
            && (calls == 0 || calls > StopWhen::MAX_TOOL_CALLS)
        {
            return Err(invalid(format!(
                "sub_agents[{index}].stop_when.tool_calls must be between 1 and {}",
                StopWhen::MAX_TOOL_CALLS
            )));
        }
        if let Some(tool) = &stop.tool_called {
            if tool.trim().is_empty() || tool.len() > MAX_TOOL_NAME_BYTES {
                return Err(invalid(format!(
                    "sub_agents[{index}].stop_when.tool_called must be a tool name of 1 to {MAX_TOOL_NAME_BYTES} bytes"
                )));
            }
            if let Some(tools) = declared.tools.as_ref().filter(|tools| !tools.contains(tool)) {
                return Err(invalid(format!(
                    "sub_agents[{index}].stop_when.tool_called {tool:?} is not one of the sub-agent's tools ({})",
                    tools.join(", ")
                )));
            }
        }
    }
    Ok(())
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
        teamster_mcp_host::validate_agent_servers(servers)?;
    }
    validate_collaborators(spec)?;
    validate_sub_agents(spec)?;
    teamster_control::check_modes(spec).map_err(|message| ServiceError::invalid_param("modes", message))?;
    teamster_control::check_default_mode(spec).map_err(|message| ServiceError::invalid_param("default_mode", message))?;
    let state = teamster_control::StateSchema::of(spec).map_err(|error| match error {
        teamster_control::StateError::Initial(_) => ServiceError::invalid_param("initial_state", error.to_string()),
        _ => ServiceError::invalid_param("state_schema", error.to_string()),
    })?;
    if state.is_none() && spec.config.as_ref().and_then(|config| config.state_tool.as_ref()).is_some_and(|tool| tool.enabled) {
        return Err(ServiceError::invalid_param("config.state_tool", "the state tools need a state_schema"));
    }
    for mode in spec.modes.iter().flatten() {
        if let Some(servers) = &mode.additional_tools {
            teamster_mcp_host::validate_agent_servers(servers)?;
        }
    }
    crate::sandboxes::validate_skills(spec)?;
    crate::sandboxes::validate_tools(spec)
}

impl Catalog {
    /// Checks a spec's shape and that its model's provider is configured here (a provider
    /// added later can be named only once it exists; a session of an agent whose provider is
    /// removed fails its turns, saying so).
    pub(crate) fn check_spec(&self, spec: &AgentSpec) -> Result<()> {
        validate_spec(spec)?;
        let most = self.turn_timeout.as_secs();
        if let Some(seconds) = spec.config.as_ref().and_then(|config| config.timeout_seconds)
            && !(1..=most).contains(&seconds)
        {
            return Err(ServiceError::invalid_param(
                "config.timeout_seconds",
                format!("timeout_seconds must be between 1 and {most} (this server's turn timeout)"),
            ));
        }
        self.sandboxes.check(spec)?;
        self.check_provider("model.name", &spec.model.name)?;
        for mode in spec.modes.iter().flatten() {
            if let Some(model) = &mode.model {
                self.check_provider("modes", model)?;
            }
        }
        Ok(())
    }

    /// What saving an agent checks beyond [`Catalog::check_spec`]: every model it names (its
    /// own, its modes', its sub-agents') is one the providers have, and every MCP server it
    /// names from the registry is configured (or is one of the program's tool sets), so a
    /// mistake is a 400 naming it now rather than a turn without a model or tools later.
    pub(crate) fn check_saved_spec(&self, spec: &AgentSpec) -> Result<()> {
        self.check_spec(spec)?;
        self.check_known_model("model.name", &spec.model.name)?;
        for mode in spec.modes.iter().flatten() {
            if let Some(model) = &mode.model {
                self.check_known_model("modes", model)?;
            }
        }
        for declared in spec.sub_agents.iter().flatten() {
            if let Some(model) = &declared.model {
                self.check_known_model("sub_agents", model)?;
            }
        }
        let Some(mcp) = self.mcp.get() else { return Ok(()) };
        let servers = spec.mcp_servers.iter().flatten().map(|server| ("mcp_servers", server));
        let modes = spec.modes.iter().flatten().flat_map(|mode| mode.additional_tools.iter().flatten().map(|server| ("modes", server)));
        for (param, server) in servers.chain(modes) {
            if let McpServerSource::Registry { name } = &server.source
                && !mcp.names_server(name)
            {
                return Err(ServiceError::invalid_param(
                    param,
                    format!(
                        "no MCP server named {name:?} is configured here; an admin adds it in the settings \
                         (PUT /api/v1/settings/mcp-servers), or give the agent the server inline \
                         ({{\"type\": \"inline\", \"name\": ..., \"url\": ...}})"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Refuses (400, about `param`) a model the providers do not have; a provider that is
    /// configured but cannot be used now (its key is missing) is not the agent's mistake.
    fn check_known_model(&self, param: &'static str, model: &str) -> Result<()> {
        match self.models().resolve(model) {
            Err(error @ (teamster_llm::registry::ResolveError::UnknownModel { .. } | teamster_llm::registry::ResolveError::UnknownProvider { .. })) => {
                Err(ServiceError::invalid_param(param, format!("the model {model:?} is not available: {error}")))
            }
            _ => Ok(()),
        }
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
                    "there is no model provider named {provider:?} (configured providers: {}); {}",
                    known.join(", "),
                    teamster_llm::registry::missing_provider_hint(&provider)
                ),
            ));
        }
        Ok(())
    }

    /// Saves a new agent in the caller's tenant, created by the caller.
    pub async fn create_agent(&self, caller: &Caller, name: &str, spec: AgentSpec) -> Result<Agent> {
        if !is_valid_resource_name(name) {
            return Err(ServiceError::invalid_param(
                "name",
                format!("agent name {name:?} must be 2-64 characters of a-z, 0-9, '.', '_' or '-', starting with a letter and ending with a letter or digit"),
            ));
        }
        self.check_saved_spec(&spec)?;
        let now = timestamp::now();
        let record = AgentRecord {
            id: ids::new_id("agent"),
            name: name.to_owned(),
            version: 1,
            spec,
            created_at: now.clone(),
            updated_at: now,
            tenant: caller.tenant.clone(),
            created_by: Some(caller.subject.clone()),
        };
        self.agents.create_agent(&record).await.map_err(|error| match error {
            // Names are unique per tenant, so this speaks of the caller's own tenant only.
            teamster_store::Error::Conflict(_) => ServiceError::Conflict {
                code: "already_exists",
                message: format!("an agent named {name:?} already exists"),
            },
            other => other.into(),
        })?;
        Ok(agent_view(record))
    }

    /// Stores a new version of an agent (its creator, a manager or an admin); sessions already
    /// started keep their version. A spec equal to the latest version's stores nothing and
    /// answers that version.
    pub async fn update_agent(&self, caller: &Caller, agent_id: &str, spec: AgentSpec) -> Result<Agent> {
        let latest = self.agent_for(caller, agent_id, AgentAccess::Manage).await?;
        self.check_saved_spec(&spec)?;
        if latest.spec == spec {
            return Ok(agent_view(latest));
        }
        let record = self
            .agents
            .add_agent_version(&latest.id, &spec, &timestamp::now())
            .await
            .map_err(|error| not_found_agent(error, agent_id))?;
        Ok(agent_view(record))
    }

    /// Creates the agent, or adds a version when the name exists (what `agents apply` does).
    pub async fn apply_agent(&self, caller: &Caller, name: &str, spec: AgentSpec) -> Result<Agent> {
        match self.agents.get_agent_by_name(&caller.tenant, name).await {
            Ok(existing) => self.update_agent(caller, &existing.id, spec).await,
            Err(teamster_store::Error::NotFound(_)) => self.create_agent(caller, name, spec).await,
            Err(other) => Err(other.into()),
        }
    }

    /// An agent the caller may see, by id, or by name (ids and names look alike, so the id is
    /// tried first).
    pub async fn get_agent(&self, caller: &Caller, agent_id: &str) -> Result<Agent> {
        Ok(agent_view(self.agent_for(caller, agent_id, AgentAccess::Use).await?))
    }

    /// The agent named `id_or_name` if the caller may do `needed` with it: 404 when the caller
    /// may not see it (as when it does not exist), 403 when it may see it but not do that.
    pub(crate) async fn agent_for(&self, caller: &Caller, id_or_name: &str, needed: AgentAccess) -> Result<AgentRecord> {
        let record = self.agent_record(caller, id_or_name).await?;
        check_access(caller, &record, needed, id_or_name)?;
        Ok(record)
    }

    async fn agent_record(&self, caller: &Caller, id_or_name: &str) -> Result<AgentRecord> {
        match self.agents.get_agent(id_or_name).await {
            Err(teamster_store::Error::NotFound(_)) if is_valid_resource_name(id_or_name) => {
                self.agents.get_agent_by_name(&caller.tenant, id_or_name).await.map_err(|error| not_found_agent(error, id_or_name))
            }
            other => other.map_err(|error| not_found_agent(error, id_or_name)),
        }
    }

    /// The agent named `name` if the caller may do `needed` with it (see [`Catalog::agent_for`]).
    pub(crate) async fn agent_by_name_for(&self, caller: &Caller, name: &str, needed: AgentAccess) -> Result<AgentRecord> {
        let not_found = || ServiceError::NotFound(format!("agent {:?} not found", name.chars().take(64).collect::<String>()));
        let record = self.agents.get_agent_by_name(&caller.tenant, name).await.map_err(|error| match error {
            teamster_store::Error::NotFound(_) => not_found(),
            other => other.into(),
        })?;
        check_access(caller, &record, needed, name).map_err(|error| match error {
            ServiceError::NotFound(_) => not_found(),
            other => other,
        })?;
        Ok(record)
    }

    /// An agent the caller may see, by name.
    pub async fn get_agent_by_name(&self, caller: &Caller, name: &str) -> Result<Agent> {
        Ok(agent_view(self.agent_by_name_for(caller, name, AgentAccess::Use).await?))
    }

    /// The agents the caller may see.
    pub async fn list_agents(&self, caller: &Caller) -> Result<Vec<Agent>> {
        let records = self.agents.list_agents().await?;
        Ok(records.into_iter().filter(|record| agent_access(caller, record) > AgentAccess::Hidden).map(agent_view).collect())
    }

    /// Deletes an agent, named by id or name (its creator, a manager or an admin); idempotent:
    /// deleting one that does not exist, or that the caller may not see, deletes nothing.
    pub async fn delete_agent(&self, caller: &Caller, agent_id: &str) -> Result<()> {
        match self.agent_for(caller, agent_id, AgentAccess::Manage).await {
            Ok(record) => {
                self.agents.delete_agent(&record.id).await?;
                Ok(())
            }
            Err(ServiceError::NotFound(_)) => Ok(()),
            Err(other) => Err(other),
        }
    }

    /// The ids of the agents `caller` manages (a session listing shows their sessions).
    pub(crate) async fn managed_agent_ids(&self, caller: &Caller) -> Result<Vec<String>> {
        let records = self.agents.list_agents().await?;
        Ok(records.into_iter().filter(|record| agent_access(caller, record) == AgentAccess::Manage).map(|record| record.id).collect())
    }
}

/// Refuses `caller` an action needing `needed` on `record`: 404 when it may not see the
/// agent, 403 when it may see it but not do this.
pub(super) fn check_access(caller: &Caller, record: &AgentRecord, needed: AgentAccess, named: &str) -> Result<()> {
    let access = agent_access(caller, record);
    if access == AgentAccess::Hidden {
        return Err(not_found_agent(teamster_store::Error::NotFound("agent"), named));
    }
    if access < needed {
        let what = match needed {
            AgentAccess::Manage => "edit, delete or share",
            AgentAccess::Use | AgentAccess::Hidden => "run",
        };
        return Err(ServiceError::Forbidden(format!(
            "you may not {what} the agent {:?}; its creator, its managers or an admin of its tenant can grant that",
            record.name
        )));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use teamster_protocol::Subject;
    use teamster_protocol::collaborator::Collaborator;

    use super::*;
    use crate::Role;

    fn caller(tenant: &str, name: &str, role: Role) -> Caller {
        let subject = Subject { subject_id: format!("{tenant}:{name}"), subject_type: "user".into(), subject_slug: name.into() };
        Caller { subject, tenant: tenant.into(), role, key_id: None }
    }

    fn agent(collaborators: &[(&str, &str)]) -> AgentRecord {
        let mut spec: AgentSpec = serde_json::from_value(serde_json::json!({"model": {"name": "p/m"}})).expect("a spec");
        spec.collaborators = Some(
            collaborators.iter().map(|(subject, role_id)| Collaborator { subject: (*subject).into(), role_id: (*role_id).into() }).collect(),
        );
        AgentRecord {
            id: "agent_1".into(),
            name: "bot".into(),
            version: 1,
            spec,
            created_at: String::new(),
            updated_at: String::new(),
            tenant: "acme".into(),
            created_by: Some(caller("acme", "ann", Role::Member).subject),
        }
    }

    #[test]
    fn the_creator_and_admins_manage_collaborators_use_or_manage_and_other_tenants_see_nothing() {
        let record = agent(&[("user:bob", "agent-user"), ("user:cy", "agent-manager"), ("user:dee", "agent-user"), ("user:dee", "agent-manager")]);
        let cases = [
            (caller("acme", "ann", Role::Member), AgentAccess::Manage),
            (caller("acme", "root", Role::Admin), AgentAccess::Manage),
            (caller("acme", "bob", Role::Member), AgentAccess::Use),
            (caller("acme", "cy", Role::Member), AgentAccess::Manage),
            // The strongest of a subject's entries counts.
            (caller("acme", "dee", Role::Member), AgentAccess::Manage),
            (caller("acme", "eve", Role::Member), AgentAccess::Hidden),
            // The same name in another tenant is another subject; its admins see nothing either.
            (caller("other", "ann", Role::Member), AgentAccess::Hidden),
            (caller("other", "bob", Role::Admin), AgentAccess::Hidden),
        ];
        for (who, expected) in cases {
            assert_eq!(agent_access(&who, &record), expected, "{who:?}");
        }
    }

    #[test]
    fn a_team_is_its_tenant_and_grants_nothing_elsewhere() {
        let record = agent(&[("team:acme", "agent-user"), ("team:other", "agent-manager")]);
        assert_eq!(agent_access(&caller("acme", "eve", Role::Member), &record), AgentAccess::Use);
        assert_eq!(agent_access(&caller("other", "eve", Role::Member), &record), AgentAccess::Hidden);
        // An agent stored before agents had owners: its tenant's admins, nobody else.
        let unowned = AgentRecord { created_by: None, tenant: "local".into(), ..agent(&[]) };
        assert_eq!(agent_access(&Caller::local(), &unowned), AgentAccess::Manage);
        assert_eq!(agent_access(&caller("local", "ann", Role::Member), &unowned), AgentAccess::Hidden);
    }

    #[test]
    fn collaborators_are_checked() {
        for (subject, role_id, fragment) in [
            ("bob", "agent-user", "subject"),
            ("user:", "agent-user", "subject"),
            ("group:x", "agent-user", "subject"),
            ("user:bob", "owner", "role_id"),
            ("user:bob", "", "role_id"),
        ] {
            let error = validate_collaborators(&agent(&[(subject, role_id)]).spec).expect_err(subject);
            assert!(matches!(&error, ServiceError::Invalid { param: Some("collaborators"), .. }), "{error:?}");
            assert!(error.to_string().contains(fragment), "{error}");
        }
        validate_collaborators(&agent(&[("user:ann@example.com", "agent-manager"), ("team:acme", "agent-user")]).spec).expect("valid");
    }
}
