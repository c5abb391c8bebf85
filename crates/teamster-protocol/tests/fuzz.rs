//! Property-based fuzzing of the agent manifest and spec parsers: `AgentManifest` from YAML
//! (what `teamster agents apply` reads) and JSON, `AgentSpec` from JSON (what the agents API
//! stores). Arbitrary text, arbitrary JSON values and valid manifests with one part changed
//! (a value of another type, an extreme number, a long or odd string, a key removed or added)
//! never panic: they parse or give an error. What parses survives a round trip: written back as
//! JSON and read again, it is the same value. The service's own checks of a spec run behind the
//! agents API and are fuzzed through it (`teamster-server/tests/fuzz.rs`).
//!
//! Each property runs a fixed number of cases; failures are kept in
//! `proptest-regressions/fuzz.txt` and replayed first.

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::{Value, json};
use teamster_protocol::agent::{AgentManifest, AgentSpec, is_valid_resource_name};

/// Cases per property (an eighth of it for deep nesting): a few seconds for all of them.
const CASES: u32 = 256;

const DEMO_MANIFEST: &str = include_str!("../../../examples/agents/demo.yaml");

/// A manifest that uses every part of the spec, as JSON.
fn full_manifest() -> Value {
    json!({
        "type": "truefoundry-agent", "name": "full", "description": "All of it.", "tags": {"team": "x"},
        "model": {"name": "openai-main/gpt-4o", "params": {"max_tokens": 512.0, "temperature": 0.2, "top_p": 1, "top_k": 5,
            "parallel_tool_calls": true, "reasoning_effort": "low", "cache_control": {"type": "ephemeral"}, "seed": 7}},
        "instructions": "Be nice to {{user}}",
        "messages": [{"type": "user.message", "content": "hello"}],
        "variables": {"user": {"default_value": "bob", "description": "Who."}},
        "sample_inputs": [{"text": "hi", "variables": {"user": "ann"}}],
        "mcp_servers": [
            {"name": "github", "enable_tools": ["@read-only", "search"], "require_approval_for_tools": ["@write"], "preload": false, "type": "truefoundry-mcp-registry"},
            {"name": "x", "preload": false, "type": "inline", "url": "https://mcp.example.com/mcp", "transport": "streamable-http"}
        ],
        "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": true}},
        "skills": [{"type": "git", "url": "https://github.com/a/b", "name": "b", "ref": "main"},
                   {"type": "truefoundry-skills-registry", "fqn": "skill:t/x:1", "preload": false}],
        "config": {"iteration_limit": 100,
            "sandbox": {"enabled": true, "file_downloads": true, "network": true, "network_policy": {"auth_inject": [
                {"type": "git", "match": {"hosts": ["github.com"]}, "auth_data": {"type": "basic", "username": "u", "password": "p"}}]}},
            "dynamic_sub_agents": {"enabled": true, "max_depth": 2},
            "context_management": {"compaction": {"enabled": true, "compaction_threshold_tokens": 50000}, "large_tool_response": {"enabled": true}},
            "generative_ui": {"enabled": true}, "ask_user_questions": {"enabled": true}, "tasks": {"enabled": true},
            "state_tool": {"enabled": true}, "tool_categories": {"search": "read", "write": "edit"},
            "budget": {"max_tokens": 100000, "max_cost_usd": 1.5}},
        "sub_agents": [{"name": "helper", "description": "Helps.", "instructions": "Help.", "tools": ["get_current_datetime"], "model": "offline/echo"}],
        "modes": [{"id": "plan", "name": "Plan", "instructions": "Plan only.", "tools": ["search"], "transitions_to": "build", "default": true},
                  {"id": "build", "model": "offline/echo", "additional_tools": [{"name": "gh", "type": "truefoundry-mcp-registry"}]}],
        "state_schema": {"type": "object", "properties": {"step": {"type": "integer", "default": 0}}},
        "collaborators": [{"subject": "user:ann", "role_id": "agent-manager"}],
        "ownedBy": {"tenant": "t"}
    })
}

/// The valid manifests the mutations start from, as JSON.
fn seeds() -> Vec<Value> {
    let demo: Value = serde_yaml::from_str(DEMO_MANIFEST).expect("the example agent is YAML");
    vec![demo, full_manifest()]
}

/// Parses `text` as a manifest (YAML and JSON) and a spec (JSON); checks what parses.
fn parse_text(text: &str) {
    if let Ok(manifest) = serde_yaml::from_str::<AgentManifest>(text) {
        check_manifest(&manifest);
    }
    if let Ok(manifest) = serde_json::from_str::<AgentManifest>(text) {
        check_manifest(&manifest);
    }
    if let Ok(spec) = serde_json::from_str::<AgentSpec>(text) {
        check_spec(&spec);
    }
}

/// Parses `value` every way the manifest reaches Teamster; checks what parses.
fn parse_value(value: &Value) {
    if let Ok(manifest) = serde_json::from_value::<AgentManifest>(value.clone()) {
        check_manifest(&manifest);
    }
    if let Ok(spec) = serde_json::from_value::<AgentSpec>(value.clone()) {
        check_spec(&spec);
    }
    // As YAML text, as `teamster agents apply -f` reads it.
    let yaml = serde_yaml::to_string(value).expect("a JSON value is YAML");
    if let Ok(manifest) = serde_yaml::from_str::<AgentManifest>(&yaml) {
        check_manifest(&manifest);
    }
    if let Some(spec) = value.get("manifest") {
        parse_text(&spec.to_string());
    }
}

/// A value nested deeper than serde_json reads (128 levels) parses from a `Value`, which has no
/// such limit, but not back from its text; no API body can be that deep, so it is left out.
fn nested_too_deep(error: &serde_json::Error) -> bool {
    error.to_string().starts_with("recursion limit exceeded")
}

fn check_manifest(manifest: &AgentManifest) {
    let text = serde_json::to_string(manifest).expect("a manifest serialises");
    let again: AgentManifest = match serde_json::from_str(&text) {
        Ok(again) => again,
        Err(error) if nested_too_deep(&error) => return,
        Err(error) => panic!("a written manifest does not read back ({error}): {}", cut(&text)),
    };
    let (before, after) = (serde_json::to_value(manifest).unwrap(), serde_json::to_value(&again).unwrap());
    assert!(same(&before, &after), "the manifest changed in a round trip through {}", cut(&text));
    let _ = is_valid_resource_name(&manifest.name);
    check_spec(&manifest.to_spec());
}

fn check_spec(spec: &AgentSpec) {
    let text = serde_json::to_string(spec).expect("a spec serialises");
    let again: AgentSpec = match serde_json::from_str(&text) {
        Ok(again) => again,
        Err(error) if nested_too_deep(&error) => return,
        Err(error) => panic!("a written spec does not read back ({error}): {}", cut(&text)),
    };
    let (before, after) = (serde_json::to_value(spec).unwrap(), serde_json::to_value(&again).unwrap());
    assert!(same(&before, &after), "the spec changed in a round trip through {}", cut(&text));
    let _ = spec.model.provider_and_model();
}

/// Whether two values are equal, floats to within their last digits: serde_json reads a float
/// without exact rounding unless its `float_roundtrip` feature is on, so a written float may come
/// back one unit in the last place off.
fn same(left: &Value, right: &Value) -> bool {
    match (left, right) {
        (Value::Number(left), Value::Number(right)) if left.is_f64() || right.is_f64() => {
            let (left, right) = (left.as_f64().unwrap(), right.as_f64().unwrap());
            left == right || (left - right).abs() <= left.abs().max(right.abs()) * 1e-15
        }
        (Value::Array(left), Value::Array(right)) => {
            left.len() == right.len() && left.iter().zip(right).all(|(left, right)| same(left, right))
        }
        (Value::Object(left), Value::Object(right)) => {
            left.len() == right.len()
                && left.iter().all(|(key, value)| right.get(key).is_some_and(|other| same(value, other)))
        }
        _ => left == right,
    }
}

/// The start of a long text, for failure messages.
fn cut(text: &str) -> String {
    text.chars().take(600).collect()
}

/// A JSON value of any shape, with the edge cases a parser must survive.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |number| serde_json::Number::from_f64(number).map(Value::Number)),
        prop::sample::select(vec![json!(u64::MAX), json!(i64::MIN), json!(-1), json!(0), json!(512.0), json!(1e308), json!(0.5)]),
        ".{0,12}".prop_map(Value::String),
        (1usize..2_000).prop_map(|length| Value::String("ж{".repeat(length))),
        prop::sample::select(vec![
            "truefoundry-agent", "inline", "truefoundry-mcp-registry", "git", "json_schema", "json_object", "text",
            "user.message", "a/b", "/", "offline/echo", "@read-only", "read", "ephemeral",
        ])
        .prop_map(|text| Value::String(text.to_owned())),
    ];
    leaf.prop_recursive(5, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..4).prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Object keys: mostly the manifest's own, so that wrong values reach the fields.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "type", "name", "model", "params", "max_tokens", "temperature", "top_k", "instructions", "messages",
            "content", "mcp_servers", "url", "transport", "enable_tools", "disable_tools", "preload", "skills",
            "config", "iteration_limit", "sandbox", "enabled", "budget", "max_cost_usd", "sub_agents", "modes", "id",
            "default", "variables", "default_value", "response_format", "json_schema", "schema", "state_schema",
            "tool_categories", "network_policy", "auth_inject", "match", "hosts", "auth_data", "description",
        ])
        .prop_map(str::to_owned),
        1 => "[a-zA-Z_]{1,8}",
    ]
}

/// One change to a JSON value at the node `at` picks (modulo the number of nodes).
#[derive(Clone, Debug)]
enum Mutation {
    Replace { at: usize, with: Value },
    Remove { at: usize },
    Insert { at: usize, key: String, with: Value },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), json_value()).prop_map(|(at, with)| Mutation::Replace { at, with }),
        any::<usize>().prop_map(|at| Mutation::Remove { at }),
        (any::<usize>(), key(), json_value()).prop_map(|(at, key, with)| Mutation::Insert { at, key, with }),
    ]
}

impl Mutation {
    fn at(&self) -> usize {
        match self {
            Mutation::Replace { at, .. } | Mutation::Remove { at } | Mutation::Insert { at, .. } => *at,
        }
    }

    fn apply(&self, value: &mut Value) {
        let mut paths = Vec::new();
        paths_of(value, &mut Vec::new(), &mut paths);
        let path = &paths[self.at() % paths.len()];
        match self {
            Mutation::Replace { with, .. } => *node(value, path) = with.clone(),
            Mutation::Remove { .. } => match path.split_last() {
                Some((last, parent)) => match node(value, parent) {
                    Value::Object(map) => {
                        map.remove(last.as_str().expect("object children are named"));
                    }
                    Value::Array(items) => {
                        items.remove(last.as_u64().expect("array children are numbered") as usize);
                    }
                    _ => unreachable!("a child's parent is a container"),
                },
                None => *value = Value::Null,
            },
            Mutation::Insert { key, with, .. } => match node(value, path) {
                Value::Object(map) => {
                    map.insert(key.clone(), with.clone());
                }
                Value::Array(items) => items.push(with.clone()),
                other => *other = with.clone(),
            },
        }
    }
}

/// Every node's path: object keys as strings, array positions as numbers.
fn paths_of(value: &Value, here: &mut Vec<Value>, paths: &mut Vec<Vec<Value>>) {
    paths.push(here.clone());
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                here.push(Value::from(key.as_str()));
                paths_of(child, here, paths);
                here.pop();
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                here.push(Value::from(index));
                paths_of(child, here, paths);
                here.pop();
            }
        }
        _ => {}
    }
}

fn node<'a>(value: &'a mut Value, path: &[Value]) -> &'a mut Value {
    path.iter().fold(value, |value, step| match step {
        Value::String(key) => &mut value[key.as_str()],
        _ => &mut value[step.as_u64().expect("a position") as usize],
    })
}

/// The fixed budget, and failures kept beside the crate (proptest finds no `lib.rs` to put them
/// beside from an integration test).
fn config() -> Config {
    Config {
        cases: CASES,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/proptest-regressions/fuzz.txt"
        )))),
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Arbitrary text, and text that looks like YAML or JSON, parses or is an error.
    #[test]
    fn arbitrary_text_never_panics(text in prop_oneof![
        ".{0,200}",
        prop::collection::vec(prop::sample::select(vec![
            "type: truefoundry-agent\n", "name: x\n", "model:\n", "  name: a/b\n", "  params: {max_tokens: 1e999}\n",
            "config: {iteration_limit: -1}\n", "- ", "  ", ": ", "&a ", "*a ", "!!binary ", "<<: *a\n", "{", "}", "[", "]",
            "\"", "'", ",", "null", "~", "18446744073709551616", "\n", "---\n", "é", "\t",
        ]), 0..40).prop_map(|pieces| pieces.concat()),
    ]) {
        parse_text(&text);
    }

    /// Arbitrary JSON values parse or are an error, as a manifest, a spec or YAML.
    #[test]
    fn arbitrary_json_never_panics(value in json_value()) {
        parse_value(&value);
    }

    /// Valid manifests with one to three parts changed parse or are an error.
    #[test]
    fn mutated_manifests_never_panic(seed in any::<usize>(), mutations in prop::collection::vec(mutation(), 1..4)) {
        let seeds = seeds();
        let mut value = seeds[seed % seeds.len()].clone();
        for mutation in &mutations {
            mutation.apply(&mut value);
        }
        parse_value(&value);
        // The spec inside an API body too.
        parse_value(&json!({"name": "x", "manifest": value}));
    }

}

proptest! {
    #![proptest_config(Config { cases: CASES / 8, ..config() })]

    /// Deep nesting where the manifest holds free JSON (tags, schemas, params) and where it does not.
    #[test]
    fn deep_nesting_never_panics(depth in 1usize..300, field in prop::sample::select(vec!["tags", "state_schema", "model", "config", "mcp_servers"])) {
        let mut value = json!("leaf");
        for level in 0..depth {
            value = if level % 2 == 0 { json!([value]) } else { json!({"type": value}) };
        }
        let mut manifest = full_manifest();
        manifest[field] = value;
        parse_value(&manifest);
    }
}

#[test]
fn the_seeds_parse() {
    for seed in seeds() {
        let manifest: AgentManifest = serde_json::from_value(seed.clone()).unwrap();
        check_manifest(&manifest);
        let spec: AgentSpec = serde_json::from_value(serde_json::to_value(manifest.to_spec()).unwrap()).unwrap();
        check_spec(&spec);
    }
}
