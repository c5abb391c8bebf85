//! An agent's modes: which one is in force for a turn, and the agent as that mode (and the
//! session's model choice) changes it. A mode layers its instructions after the agent's,
//! replaces its model, and either adds MCP servers (`additional_tools`) or limits the offered
//! tools to a list (`tools`; `submit_plan` stays, since a mode with `transitions_to` needs it).

use std::collections::HashSet;

use teamster_protocol::AgentSpec;
use teamster_protocol::agent::ModeSpec;
use teamster_protocol::control::SessionControl;

use crate::plans::SUBMIT_PLAN;

/// The most modes an agent has.
pub const MAX_MODES: usize = 16;
/// The most JSON a mode's `metadata` may hold.
const MAX_MODE_METADATA_BYTES: usize = 16 * 1024;
/// The longest mode id, in bytes.
const MAX_MODE_ID_BYTES: usize = 64;

/// Checks an agent's modes; the error names the offending mode and field.
pub fn check_modes(spec: &AgentSpec) -> Result<(), String> {
    let Some(modes) = &spec.modes else { return Ok(()) };
    if modes.is_empty() {
        return Err("modes: give at least one mode, or leave modes out".to_owned());
    }
    if modes.len() > MAX_MODES {
        return Err(format!("modes: an agent has at most {MAX_MODES} modes"));
    }
    let mut ids = HashSet::new();
    for (index, mode) in modes.iter().enumerate() {
        let id = &mode.id;
        if !is_mode_id(id) {
            return Err(format!(
                "modes[{index}].id: {id:?} is not a mode id (1 to {MAX_MODE_ID_BYTES} of a-z, 0-9, '_' and '-')"
            ));
        }
        if !ids.insert(id.as_str()) {
            return Err(format!("modes[{index}].id: two modes are named {id:?}"));
        }
        if mode.tools.is_some() && mode.additional_tools.is_some() {
            return Err(format!("modes[{index}]: tools replaces the agent's tools and additional_tools adds to them; give one"));
        }
        if let Some(model) = &mode.model
            && !model.contains('/')
        {
            return Err(format!("modes[{index}].model: {model:?} is not provider/model"));
        }
    }
    for (index, mode) in modes.iter().enumerate() {
        if let Some(target) = &mode.transitions_to
            && (!ids.contains(target.as_str()) || *target == mode.id)
        {
            return Err(format!(
                "modes[{index}].transitions_to: {target:?} is not another mode of this agent (modes: {})",
                mode_ids(spec)
            ));
        }
    }
    if modes.iter().filter(|mode| mode.default).count() > 1 {
        return Err("modes: at most one mode is the default".to_owned());
    }
    for (index, mode) in modes.iter().enumerate() {
        let bytes = mode.metadata.as_ref().map_or(0, |metadata| serde_json::to_string(metadata).map_or(usize::MAX, |text| text.len()));
        if bytes > MAX_MODE_METADATA_BYTES {
            return Err(format!("modes[{index}].metadata: at most {MAX_MODE_METADATA_BYTES} bytes of JSON"));
        }
    }
    Ok(())
}

fn is_mode_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_MODE_ID_BYTES
        && id.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_' || byte == b'-')
}

/// The ids of the agent's modes, comma-separated (for errors naming the allowed values).
pub fn mode_ids(spec: &AgentSpec) -> String {
    spec.modes.iter().flatten().map(|mode| mode.id.as_str()).collect::<Vec<_>>().join(", ")
}

/// The mode of the agent with id `id`.
pub fn mode<'a>(spec: &'a AgentSpec, id: &str) -> Option<&'a ModeSpec> {
    spec.modes.iter().flatten().find(|mode| mode.id == id)
}

/// Checks a spec's `default_mode`: one of its modes.
pub fn check_default_mode(spec: &AgentSpec) -> Result<(), String> {
    match &spec.default_mode {
        Some(default) if mode(spec, default).is_none() => Err(match spec.modes.as_deref().unwrap_or_default().is_empty() {
            true => format!("default_mode: {default:?} names a mode, and this agent has none"),
            false => format!("default_mode: {default:?} is not a mode of this agent (modes: {})", mode_ids(spec)),
        }),
        _ => Ok(()),
    }
}

/// The mode a session is in: the one chosen if the agent still has it, else the default (the
/// agent's `default_mode`, the mode marked so, or the first); none for agents without modes.
pub fn mode_in_force<'a>(spec: &'a AgentSpec, chosen: Option<&str>) -> Option<&'a ModeSpec> {
    let modes = spec.modes.as_deref().unwrap_or_default();
    chosen
        .and_then(|id| modes.iter().find(|mode| mode.id == id))
        .or_else(|| spec.default_mode.as_deref().and_then(|id| modes.iter().find(|mode| mode.id == id)))
        .or_else(|| modes.iter().find(|mode| mode.default))
        .or_else(|| modes.first())
}

/// The agent as a turn with `control` runs it: the mode's instructions after the agent's, the
/// mode's model (and then the session's), the mode's additional MCP servers, the session's
/// models for its declared sub-agents. Tool limits are
/// applied to the turn's tools with [`offers`].
pub fn agent_in_mode(spec: &AgentSpec, control: &SessionControl) -> AgentSpec {
    let mut layered = spec.clone();
    if let Some(mode) = mode_in_force(spec, control.mode.as_deref()) {
        if let Some(instructions) = mode.instructions.as_deref().filter(|text| !text.trim().is_empty()) {
            layered.instructions = Some(match spec.instructions.as_deref().filter(|text| !text.trim().is_empty()) {
                Some(base) => format!("{base}\n\n{instructions}"),
                None => instructions.to_owned(),
            });
        }
        if let Some(model) = &mode.model {
            layered.model.name = model.clone();
        }
        if let Some(servers) = &mode.additional_tools {
            layered.mcp_servers.get_or_insert_with(Vec::new).extend(servers.iter().cloned());
        }
    }
    if let Some(model) = &control.model {
        layered.model.name = model.clone();
    }
    for declared in layered.sub_agents.iter_mut().flatten() {
        if let Some(model) = control.subagent_models.get(&declared.name) {
            declared.model = Some(model.clone());
        }
    }
    layered
}

/// Whether a turn with `control` offers the tool `name` to the model.
pub fn offers(spec: &AgentSpec, control: &SessionControl, name: &str) -> bool {
    match mode_in_force(spec, control.mode.as_deref()).and_then(|mode| mode.tools.as_ref()) {
        Some(tools) => name == SUBMIT_PLAN || tools.iter().any(|tool| tool == name),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(modes: serde_json::Value) -> AgentSpec {
        serde_json::from_value(serde_json::json!({
            "model": {"name": "openai/base"},
            "instructions": "You help.",
            "modes": modes,
        }))
        .expect("spec")
    }

    fn plan_and_build() -> AgentSpec {
        spec(serde_json::json!([
            {"id": "plan", "instructions": "Plan first.", "tools": ["read"], "transitions_to": "build"},
            {"id": "build", "instructions": "Build it.", "model": "anthropic/builder", "default": true,
             "additional_tools": [{"type": "inline", "name": "git", "url": "http://127.0.0.1:1/mcp"}]}
        ]))
    }

    #[test]
    fn a_mode_layers_instructions_model_and_tools_onto_the_agent() {
        let spec = plan_and_build();
        let plan = SessionControl { mode: Some("plan".into()), model: None, ..SessionControl::default() };
        let planning = agent_in_mode(&spec, &plan);
        assert_eq!(planning.instructions.as_deref(), Some("You help.\n\nPlan first."));
        assert_eq!(planning.model.name, "openai/base");
        assert!(offers(&spec, &plan, "read") && offers(&spec, &plan, SUBMIT_PLAN) && !offers(&spec, &plan, "write"));

        // No choice (or a mode the agent lost) is the default mode.
        for chosen in [None, Some("gone".to_owned())] {
            let building = agent_in_mode(&spec, &SessionControl { mode: chosen, model: None, ..SessionControl::default() });
            assert_eq!(building.instructions.as_deref(), Some("You help.\n\nBuild it."));
            assert_eq!(building.model.name, "anthropic/builder");
            assert_eq!(building.mcp_servers.as_ref().map(Vec::len), Some(1));
        }
        // The session's model wins over the mode's.
        let chosen = SessionControl { mode: Some("build".into()), model: Some("openai/chosen".into()), ..SessionControl::default() };
        assert_eq!(agent_in_mode(&spec, &chosen).model.name, "openai/chosen");
        assert!(offers(&spec, &chosen, "write"));
    }

    #[test]
    fn without_a_default_the_first_mode_is_in_force_and_no_modes_change_nothing() {
        let spec = spec(serde_json::json!([{"id": "ask"}, {"id": "code"}]));
        assert_eq!(mode_in_force(&spec, None).map(|mode| mode.id.as_str()), Some("ask"));
        let plain = AgentSpec { modes: None, ..spec };
        assert_eq!(agent_in_mode(&plain, &SessionControl::default()), plain);
    }

    #[test]
    fn bad_modes_are_named() {
        assert_eq!(check_modes(&plan_and_build()), Ok(()));
        let cases = [
            (serde_json::json!([]), "at least one mode"),
            (serde_json::json!([{"id": "Plan"}]), "modes[0].id"),
            (serde_json::json!([{"id": "a"}, {"id": "a"}]), "two modes are named"),
            (serde_json::json!([{"id": "a", "tools": [], "additional_tools": []}]), "give one"),
            (serde_json::json!([{"id": "a", "model": "gpt"}]), "modes[0].model"),
            (serde_json::json!([{"id": "a", "transitions_to": "b"}]), "modes[0].transitions_to"),
            (serde_json::json!([{"id": "a", "transitions_to": "a"}]), "not another mode"),
            (serde_json::json!([{"id": "a", "default": true}, {"id": "b", "default": true}]), "at most one"),
        ];
        for (modes, expected) in cases {
            let error = check_modes(&spec(modes.clone())).expect_err(&modes.to_string());
            assert!(error.contains(expected), "{modes}: {error}");
        }
    }
}
