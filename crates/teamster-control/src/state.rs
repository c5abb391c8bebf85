//! A session's state: a JSON object the agent's spec describes with a JSON Schema
//! (`state_schema`), starting from the schema's defaults, changed by clients and (where the
//! spec allows, `config.state_tool`) by the agent with JSON merge patches (RFC 7396). A change
//! that breaks the schema is refused whole.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde_json::{Map, Value};
use teamster_protocol::{AgentSpec, ToolInfo};
use teamster_tools::{Tool, ToolAnnotations, ToolGate, ToolOutput, ToolSource};

/// The names of the state tools.
pub const STATE_GET: &str = "state_get";
pub const STATE_UPDATE: &str = "state_update";

/// The most bytes a session's state takes as JSON.
pub const MAX_STATE_BYTES: usize = 64 * 1024;

/// Why a state or its schema is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The spec's schema is not a JSON Schema of an object, or its defaults break it.
    #[error("state_schema: {0}")]
    Schema(String),
    /// The agent declares no state.
    #[error("the session's agent declares no state_schema")]
    NoState,
    /// The state would break the schema (or its size bound).
    #[error("{0}")]
    Invalid(String),
    /// The spec's `initial_state` breaks its schema, or it has no schema.
    #[error("initial_state: {0}")]
    Initial(String),
}

/// The spec's state schema, compiled.
pub struct StateSchema {
    validator: jsonschema::Validator,
    initial: Value,
}

impl std::fmt::Debug for StateSchema {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("StateSchema").field("initial", &self.initial).finish_non_exhaustive()
    }
}

impl StateSchema {
    /// The schema of the spec's state; `Ok(None)` for agents without one.
    pub fn of(spec: &AgentSpec) -> Result<Option<StateSchema>, StateError> {
        let Some(schema) = &spec.state_schema else {
            return match spec.initial_state {
                Some(_) => Err(StateError::Initial("an initial state needs a state_schema".to_owned())),
                None => Ok(None),
            };
        };
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(StateError::Schema("the state is an object: give \"type\": \"object\"".to_owned()));
        }
        let validator = jsonschema::validator_for(schema).map_err(|error| StateError::Schema(error.to_string()))?;
        let initial = Value::Object(
            schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|properties| {
                    properties
                        .iter()
                        .filter_map(|(name, property)| property.get("default").map(|value| (name.clone(), value.clone())))
                        .collect::<Map<String, Value>>()
                })
                .unwrap_or_default(),
        );
        let mut schema = StateSchema { validator, initial };
        schema.check(&schema.initial).map_err(|error| StateError::Schema(format!("its defaults are not a valid state: {error}")))?;
        if let Some(patch) = &spec.initial_state {
            if !patch.is_object() {
                return Err(StateError::Initial("the initial state is an object (a merge patch over the schema's defaults)".to_owned()));
            }
            schema.initial = schema.patched(None, patch).map_err(|error| StateError::Initial(error.to_string()))?;
        }
        Ok(Some(schema))
    }

    /// The state of a session that has none stored: the schema's defaults, with the spec's
    /// `initial_state` over them.
    pub fn initial(&self) -> &Value {
        &self.initial
    }

    /// Checks a state against the schema and the size bound.
    pub fn check(&self, state: &Value) -> Result<(), StateError> {
        if serde_json::to_string(state).map_or(usize::MAX, |text| text.len()) > MAX_STATE_BYTES {
            return Err(StateError::Invalid(format!("the state is at most {MAX_STATE_BYTES} bytes of JSON")));
        }
        let errors: Vec<String> =
            self.validator.iter_errors(state).take(5).map(|error| format!("at {:?}: {error}", error.instance_path().to_string())).collect();
        match errors.is_empty() {
            true => Ok(()),
            false => Err(StateError::Invalid(format!("the state breaks the schema: {}", errors.join("; ")))),
        }
    }

    /// `current` (or the initial state) with `patch` merged in, if the result is valid.
    pub fn patched(&self, current: Option<&Value>, patch: &Value) -> Result<Value, StateError> {
        let mut state = current.unwrap_or(&self.initial).clone();
        merge_patch(&mut state, patch);
        self.check(&state)?;
        Ok(state)
    }
}

/// Applies a JSON merge patch (RFC 7396): objects merge key by key, `null` removes a key,
/// anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(changes) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(fields) = target else { return };
    for (key, change) in changes {
        if change.is_null() {
            fields.remove(key);
        } else {
            merge_patch(fields.entry(key.clone()).or_insert(Value::Null), change);
        }
    }
}

/// Where the state tools keep a changed state (the session's record).
#[async_trait]
pub trait StateSink: Send + Sync {
    async fn save(&self, state: &Value) -> Result<(), String>;
}

/// The state tools of one turn: `state_get` and `state_update`.
pub struct SessionState {
    schema: StateSchema,
    state: Mutex<Value>,
    sink: Arc<dyn StateSink>,
}

impl SessionState {
    /// The tools over a session's `state` (the initial state when `None`), saving changes to
    /// `sink`.
    pub fn new(schema: StateSchema, state: Option<Value>, sink: Arc<dyn StateSink>) -> SessionState {
        let state = state.unwrap_or_else(|| schema.initial.clone());
        SessionState { schema, state: Mutex::new(state), sink }
    }

    fn current(&self) -> Value {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[async_trait]
impl ToolSource for SessionState {
    async fn list(&self) -> Result<Vec<Tool>, teamster_tools::Error> {
        let tool = |name: &str, description: &str, parameters: Value, read_only: bool| Tool {
            name: name.to_owned(),
            description: description.to_owned(),
            input_schema: parameters,
            info: ToolInfo::System { name: name.to_owned() },
            annotations: ToolAnnotations { read_only, destructive: false, idempotent: read_only },
            gate: ToolGate::None,
        };
        Ok(vec![
            tool(STATE_GET, "Returns this session's state (a JSON object).", serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false}), true),
            tool(
                STATE_UPDATE,
                "Changes this session's state with a JSON merge patch (objects merge, null removes a key). \
                 A change that breaks the state's schema is refused. Returns the new state.",
                serde_json::json!({
                    "type": "object",
                    "properties": {"patch": {"type": "object", "description": "The JSON merge patch."}},
                    "required": ["patch"],
                    "additionalProperties": false,
                }),
                false,
            ),
        ])
    }

    async fn call(&self, name: &str, arguments: &str) -> ToolOutput {
        match name {
            STATE_GET => ToolOutput::ok(self.current().to_string()),
            STATE_UPDATE => {
                let patch = match serde_json::from_str::<Value>(arguments).ok().and_then(|mut arguments| arguments.get_mut("patch").map(Value::take)) {
                    Some(patch @ Value::Object(_)) => patch,
                    _ => return ToolOutput::error("state_update takes {\"patch\": {...}}, a JSON merge patch object"),
                };
                let state = match self.schema.patched(Some(&self.current()), &patch) {
                    Ok(state) => state,
                    Err(error) => return ToolOutput::error(error.to_string()),
                };
                if let Err(error) = self.sink.save(&state).await {
                    return ToolOutput::error(format!("the state could not be saved: {error}"));
                }
                *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state.clone();
                ToolOutput::ok(state.to_string())
            }
            other => ToolOutput::error(format!("There is no tool named {other:?}.")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(schema: Value) -> AgentSpec {
        serde_json::from_value(serde_json::json!({"model": {"name": "a/b"}, "state_schema": schema})).expect("spec")
    }

    fn counter_schema() -> StateSchema {
        StateSchema::of(&spec(serde_json::json!({
            "type": "object",
            "properties": {"count": {"type": "integer", "minimum": 0, "default": 0}, "notes": {"type": "object"}},
            "required": ["count"],
        })))
        .expect("valid")
        .expect("declared")
    }

    #[test]
    fn merge_patches_follow_rfc_7396() {
        let mut target = serde_json::json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut target, &serde_json::json!({"a": "z", "c": {"f": null}}));
        assert_eq!(target, serde_json::json!({"a": "z", "c": {"d": "e"}}));
        merge_patch(&mut target, &serde_json::json!({"c": ["x"]}));
        assert_eq!(target, serde_json::json!({"a": "z", "c": ["x"]}));
    }

    #[test]
    fn states_start_from_defaults_and_patches_that_break_the_schema_are_refused() {
        let schema = counter_schema();
        assert_eq!(schema.initial(), &serde_json::json!({"count": 0}));
        let state = schema.patched(None, &serde_json::json!({"count": 2, "notes": {"x": 1}})).expect("valid patch");
        assert_eq!(state, serde_json::json!({"count": 2, "notes": {"x": 1}}));
        let error = schema.patched(Some(&state), &serde_json::json!({"count": -1})).expect_err("below the minimum");
        assert!(error.to_string().contains("/count"), "{error}");
        assert!(schema.patched(Some(&state), &serde_json::json!({"count": null})).is_err(), "count is required");
    }

    #[test]
    fn bad_schemas_are_named() {
        assert_eq!(StateSchema::of(&AgentSpec::default()).expect("no schema").map(|_| ()), None);
        for (schema, needle) in [
            (serde_json::json!({"type": "array"}), "\"type\": \"object\""),
            (serde_json::json!({"type": "object", "properties": {"n": {"type": "nope"}}}), "state_schema"),
            (serde_json::json!({"type": "object", "properties": {"n": {"type": "integer", "default": "x"}}}), "defaults"),
        ] {
            let error = StateSchema::of(&spec(schema.clone())).expect_err(&schema.to_string());
            assert!(error.to_string().contains(needle), "{schema}: {error}");
        }
    }
}
