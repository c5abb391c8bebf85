//! The columns the queries of both backends select, in the order of the row tuples that
//! [`teamster_store::codec`] assembles records from.

/// The columns every agent query selects, in [`teamster_store::codec::AgentRow`] order.
pub const AGENT_COLUMNS: &str =
    "agents.id, agents.name, agent_versions.version, agent_versions.spec, agents.created_at, agent_versions.created_at, \
     agents.tenant, agents.created_by";

/// The columns every session query selects, in [`teamster_store::codec::SessionRow`] order.
pub const SESSION_COLUMNS: &str = "id, kind, agent_id, agent_version, agent_name, draft_spec, title, \
     created_by, created_at, updated_at, last_turn_id, control, resource_id";

/// The query for one version of an agent selected by `condition` on `$1`: the latest, or with
/// `pinned` the one numbered `$2`.
pub fn agent_query(condition: &str, pinned: bool) -> String {
    let version_join =
        if pinned { "agent_versions.version = $2" } else { "agent_versions.version = agents.latest_version" };
    format!(
        "SELECT {AGENT_COLUMNS} FROM agents JOIN agent_versions \
         ON agent_versions.agent_id = agents.id AND {version_join} WHERE {condition}"
    )
}

/// The query for one session, by id (`$1`).
pub fn session_query() -> String {
    format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1")
}

/// The columns every turn query selects, in [`teamster_store::codec::TurnRow`] order.
pub const TURN_COLUMNS: &str = "id, session_id, previous_turn_id, input, state, created_by, created_at, control";
