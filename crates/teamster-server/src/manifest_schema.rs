//! The agent manifest's JSON Schema, served at `GET /api/v1/schemas/agent-manifest.json`, and
//! the check of a manifest's keys against it.
//!
//! The schema is not written by hand: it is the OpenAPI document's `AgentSpec` (derived from the
//! `teamster-protocol` types) with every schema it refers to moved under `$defs`, and every
//! object closed (`additionalProperties: false`, or `unevaluatedProperties: false` where an
//! object is made of parts), so editors flag a key the server does not know. The wire types
//! themselves still decode leniently (the gateway dialect tolerates unknown fields); the native
//! agent routes refuse a manifest with keys the schema does not have, naming each by the path
//! the user typed and suggesting the key it most likely meant (`instrucions` → `instructions`).
//! A key an entry of another kind has (a git skill's `preload`) is refused the same way, naming
//! the kind.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use teamster_protocol::agent::AgentSpec;
use utoipa::{PartialSchema, ToSchema};

use crate::error::ApiError;

/// The schema's name among the document's components.
const ROOT: &str = "AgentSpec";

/// A branch of a `oneOf` whose `type` does not match the value's counts as this many unknown keys.
const KIND_MISMATCH: usize = 1000;

/// The manifest's JSON Schema (2020-12), built once.
pub fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        // The manifest's type and every type it refers to, as the OpenAPI document's
        // components name them.
        let mut components = vec![(<AgentSpec as ToSchema>::name().into_owned(), <AgentSpec as PartialSchema>::schema())];
        <AgentSpec as ToSchema>::schemas(&mut components);
        let components: Map<String, Value> = components
            .into_iter()
            .map(|(name, schema)| (name, serde_json::to_value(schema).expect("a schema serialises")))
            .collect();
        build(&Value::Object(components))
    })
}

/// The schema of `ROOT` and everything it refers to, from the document's `components`.
fn build(components: &Value) -> Value {
    let mut defs = Map::new();
    let mut todo = vec![ROOT.to_owned()];
    while let Some(name) = todo.pop() {
        if defs.contains_key(&name) {
            continue;
        }
        let mut schema = components[&name].clone();
        rewrite_refs(&mut schema, &mut todo);
        defs.insert(name, schema);
    }
    // Parts of an `allOf` cannot each be closed: each would refuse the others' keys.
    let mut parts = BTreeSet::new();
    for schema in defs.values() {
        all_of_parts(schema, &mut parts);
    }
    for (name, schema) in &mut defs {
        close(schema, parts.contains(name));
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "/api/v1/schemas/agent-manifest.json",
        "title": "Teamster agent manifest",
        "description": "The `manifest` of a saved agent (POST/PUT /api/v1/agents): its model, instructions, tools and runtime configuration. Keys the schema does not list are refused.",
        "$ref": format!("#/$defs/{ROOT}"),
        "$defs": defs,
    })
}

/// Points `#/components/schemas/X` at `#/$defs/X`, noting each `X` in `names`.
fn rewrite_refs(schema: &mut Value, names: &mut Vec<String>) {
    match schema {
        Value::Object(object) => {
            if let Some(Value::String(target)) = object.get_mut("$ref")
                && let Some(name) = target.strip_prefix("#/components/schemas/")
            {
                names.push(name.to_owned());
                *target = format!("#/$defs/{name}");
            }
            object.values_mut().for_each(|value| rewrite_refs(value, names));
        }
        Value::Array(items) => items.iter_mut().for_each(|value| rewrite_refs(value, names)),
        _ => {}
    }
}

/// The names of the definitions some `allOf` is made of.
fn all_of_parts(schema: &Value, parts: &mut BTreeSet<String>) {
    match schema {
        Value::Object(object) => {
            for part in object.get("allOf").and_then(Value::as_array).into_iter().flatten() {
                if let Some(name) = part.get("$ref").and_then(Value::as_str).and_then(|target| target.strip_prefix("#/$defs/")) {
                    parts.insert(name.to_owned());
                }
            }
            object.values().for_each(|value| all_of_parts(value, parts));
        }
        Value::Array(items) => items.iter().for_each(|value| all_of_parts(value, parts)),
        _ => {}
    }
}

/// Closes every object schema with `properties` and no `additionalProperties` of its own;
/// an `allOf` is closed as a whole. `is_part` leaves this schema itself open.
fn close(schema: &mut Value, is_part: bool) {
    let Value::Object(object) = schema else { return };
    if object.contains_key("allOf") {
        object.insert("unevaluatedProperties".to_owned(), Value::Bool(false));
        for part in object.get_mut("allOf").and_then(Value::as_array_mut).into_iter().flatten() {
            close(part, true);
        }
    } else if object.contains_key("properties") && !object.contains_key("additionalProperties") && !is_part {
        object.insert("additionalProperties".to_owned(), Value::Bool(false));
    }
    for (key, value) in object.iter_mut() {
        match (key.as_str(), value) {
            ("allOf", _) => {}
            ("properties", Value::Object(properties)) => properties.values_mut().for_each(|value| close(value, false)),
            (_, Value::Array(items)) => items.iter_mut().for_each(|value| close(value, false)),
            (_, value @ Value::Object(_)) => close(value, false),
            _ => {}
        }
    }
}

/// The schema as served: pretty JSON, serialised once.
pub fn schema_text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| serde_json::to_string_pretty(schema()).expect("a schema serialises"))
}

/// A key of a manifest that its schema does not have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownKey {
    /// Where, as the user typed it: `config.sandbox.enabld`, `skills[0].preload`.
    pub path: String,
    /// The key the user most likely meant, when one is close.
    pub suggestion: Option<String>,
    /// The entry's `type`, when the key is one that other kinds of the entry have.
    pub kind: Option<String>,
    /// The keys the entry may have.
    pub known: Vec<String>,
}

impl std::fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Some(kind) => write!(f, "`{}`: an entry of type {kind:?} has no such key", self.path)?,
            None => write!(f, "`{}` is not a key of the manifest", self.path)?,
        }
        match &self.suggestion {
            Some(suggestion) => write!(f, "; did you mean `{suggestion}`?"),
            None => write!(f, " (its keys there: {})", self.known.join(", ")),
        }
    }
}

/// The keys of `manifest` that the schema does not have, in the order they appear.
pub fn unknown_keys(manifest: &Value) -> Vec<UnknownKey> {
    let root = schema();
    let mut found = Vec::new();
    Walker { defs: &root["$defs"] }.walk(&root["$defs"][ROOT], manifest, "", &mut found);
    found
}

/// One sentence naming every unknown key of a manifest.
pub fn describe(unknown: &[UnknownKey]) -> String {
    let each: Vec<String> = unknown.iter().map(ToString::to_string).collect();
    format!("the manifest has {} the server does not know: {}", if unknown.len() == 1 { "a key" } else { "keys" }, each.join("; "))
}

/// Reads a request body whose `manifest` is an agent manifest: unknown keys of the body or of
/// the manifest are 400 `unknown_field` (see [`check_keys`]); then the body decodes as `T`, its
/// errors as [`crate::extract::JsonBody`] words them.
pub fn decode_request<T: DeserializeOwned>(body: Value, request_keys: &[&str]) -> Result<T, ApiError> {
    check_keys(&body, request_keys)?;
    decode(body)
}

/// Refuses a request body with keys other than `request_keys`, or whose `manifest` has keys its
/// schema does not: 400 `unknown_field`, the message naming each, the `param` the first one's
/// path in the body.
pub fn check_keys(body: &Value, request_keys: &[&str]) -> Result<(), ApiError> {
    let mut unknown = Vec::new();
    if let Value::Object(object) = body {
        for key in object.keys().filter(|key| !request_keys.contains(&key.as_str())) {
            let known: Vec<String> = request_keys.iter().map(|key| (*key).to_owned()).collect();
            unknown.push((String::new(), UnknownKey { path: key.clone(), suggestion: closest(key, &known), kind: None, known }));
        }
        if let Some(manifest) = object.get("manifest") {
            unknown.extend(unknown_keys(manifest).into_iter().map(|key| ("manifest.".to_owned(), key)));
        }
    }
    match unknown.first() {
        Some((prefix, first)) => {
            let param = format!("{prefix}{}", first.path);
            let keys: Vec<UnknownKey> = unknown.iter().map(|(_, key)| key.clone()).collect();
            Err(ApiError::bad_request("unknown_field", describe(&keys)).with_param(&param))
        }
        None => Ok(()),
    }
}

/// Decodes a checked body, naming the path of a value of the wrong shape.
pub fn decode<T: DeserializeOwned>(body: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(body).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        let at = if path == "." { String::new() } else { format!(" at {path}") };
        let refused = ApiError::bad_request("invalid_request", format!("the request body is invalid{at}: {inner}"));
        if path == "." { refused } else { refused.with_param(&path) }
    })
}

/// Walks a value along its schema.
struct Walker<'a> {
    defs: &'a Value,
}

impl<'a> Walker<'a> {
    /// The schema a `$ref` points at (followed until it points no further).
    fn resolve(&self, mut schema: &'a Value) -> &'a Value {
        for _ in 0..16 {
            match schema.get("$ref").and_then(Value::as_str).and_then(|target| target.strip_prefix("#/$defs/")) {
                Some(name) => schema = &self.defs[name],
                None => break,
            }
        }
        schema
    }

    /// Notes the unknown keys of `value` under `path`; answers how badly the value fits (its
    /// unknown keys, and [`KIND_MISMATCH`] for a `type` the schema does not allow).
    fn walk(&self, schema: &'a Value, value: &Value, path: &str, found: &mut Vec<UnknownKey>) -> usize {
        let schema = self.resolve(schema);
        if value.is_null() {
            return 0;
        }
        if let Some(branches) = schema.get("oneOf").or_else(|| schema.get("anyOf")).and_then(Value::as_array) {
            return self.walk_branches(branches, value, path, found);
        }
        match value {
            Value::Object(object) => self.walk_object(schema, object, path, found),
            Value::Array(items) => match schema.get("items") {
                Some(item) => items.iter().enumerate().map(|(index, value)| self.walk(item, value, &format!("{path}[{index}]"), found)).sum(),
                None => 0,
            },
            _ => 0,
        }
    }

    /// The branch of a `oneOf` that fits the value best is the one whose keys count.
    fn walk_branches(&self, branches: &'a [Value], value: &Value, path: &str, found: &mut Vec<UnknownKey>) -> usize {
        let mut best: Option<(usize, Vec<UnknownKey>)> = None;
        for branch in branches {
            if self.resolve(branch).get("type").and_then(Value::as_str) == Some("null") {
                continue;
            }
            let mut keys = Vec::new();
            let misfit = self.walk(branch, value, path, &mut keys);
            if best.as_ref().is_none_or(|(least, _)| misfit < *least) {
                best = Some((misfit, keys));
            }
        }
        let (misfit, keys) = best.unwrap_or_default();
        found.extend(keys);
        misfit
    }

    fn walk_object(&self, schema: &'a Value, object: &Map<String, Value>, path: &str, found: &mut Vec<UnknownKey>) -> usize {
        // The properties of the schema and of every part of its `allOf`.
        let mut properties: Vec<(&'a String, &'a Value)> = Vec::new();
        let mut closed = schema.get("additionalProperties") == Some(&Value::Bool(false))
            || schema.get("unevaluatedProperties") == Some(&Value::Bool(false));
        let mut extra = schema.get("additionalProperties").filter(|extra| extra.is_object());
        let parts = schema.get("allOf").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for part in std::iter::once(schema).chain(parts.iter().map(|part| self.resolve(part))) {
            properties.extend(part.get("properties").and_then(Value::as_object).into_iter().flatten());
            closed |= part.get("additionalProperties") == Some(&Value::Bool(false));
            extra = extra.or_else(|| part.get("additionalProperties").filter(|extra| extra.is_object()));
        }
        let mut misfit = 0;
        if let (Some(kind), Some(allowed)) = (object.get("type").and_then(Value::as_str), kinds(&properties))
            && !allowed.contains(&kind)
        {
            misfit += KIND_MISMATCH;
        }
        let known: Vec<String> = properties.iter().map(|(name, _)| (*name).clone()).collect();
        for (key, value) in object {
            let at = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
            match properties.iter().find(|(name, _)| *name == key) {
                Some((_, property)) => misfit += self.walk(property, value, &at, found),
                None => match extra {
                    Some(extra) if !extra.as_object().is_some_and(Map::is_empty) => misfit += self.walk(extra, value, &at, found),
                    Some(_) => {}
                    None if closed => {
                        misfit += 1;
                        let suggestion = closest(key, &known);
                        // A key no kind of the entry has is a typo more likely than a mix-up of kinds.
                        let kind = object.get("type").and_then(Value::as_str).filter(|_| suggestion.is_none() && known.iter().any(|name| name == "type"));
                        found.push(UnknownKey {
                            path: at,
                            suggestion,
                            kind: kind.map(str::to_owned),
                            known: known.clone(),
                        });
                    }
                    None => {}
                },
            }
        }
        misfit
    }
}

/// The values a schema's `type` property allows (`enum`), when it lists them.
fn kinds<'a>(properties: &[(&'a String, &'a Value)]) -> Option<Vec<&'a str>> {
    let (_, kind) = properties.iter().find(|(name, _)| name.as_str() == "type")?;
    let values = kind.get("enum")?.as_array()?;
    Some(values.iter().filter_map(Value::as_str).collect())
}

/// The known key closest to `typed`, when it is close enough to be what the user meant: at
/// most two edits away (one for keys of four letters or fewer), or the same but for case, `-`
/// and `_`.
fn closest(typed: &str, known: &[String]) -> Option<String> {
    let fold = |text: &str| text.to_ascii_lowercase().replace('-', "_");
    if let Some(same) = known.iter().find(|name| fold(name) == fold(typed)) {
        return Some(same.clone());
    }
    let allowed = if typed.chars().count() <= 4 { 1 } else { 2 };
    known
        .iter()
        .map(|name| (edit_distance(&fold(typed), &fold(name)), name))
        .filter(|(distance, _)| *distance <= allowed)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name.clone())
}

/// The Levenshtein distance, with a swap of two neighbours counting as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1).min(rows[i][j - 1] + 1).min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_key_is_named_with_what_was_meant() {
        let unknown = unknown_keys(&json!({"model": {"name": "p/m"}, "instrucions": "Help."}));
        assert_eq!(unknown.len(), 1);
        assert_eq!(unknown[0].path, "instrucions");
        assert_eq!(unknown[0].suggestion.as_deref(), Some("instructions"));
        assert_eq!(
            unknown[0].to_string(),
            "`instrucions` is not a key of the manifest; did you mean `instructions`?"
        );
    }

    #[test]
    fn nested_keys_and_keys_of_another_kind_are_found() {
        let manifest = json!({
            "model": {"name": "p/m", "params": {"temperature": 0.2, "seed": 7}},
            "config": {"sandbox": {"enabld": true}, "tasks": {"enabled": true}},
            "mcp_servers": [{"type": "inline", "name": "x", "url": "http://h/mcp", "enable_tool": ["a"]}],
            "skills": [{"type": "git", "url": "u", "name": "n", "ref": "main", "preload": true},
                       {"type": "truefoundry-skills-registry", "fqn": "f", "preload": true}, {"name": "plain"}],
            "variables": {"who": "you"},
            "state_schema": {"type": "object", "anything": 1},
        });
        let unknown = unknown_keys(&manifest);
        let paths: Vec<&str> = unknown.iter().map(|key| key.path.as_str()).collect();
        assert_eq!(paths, ["config.sandbox.enabld", "mcp_servers[0].enable_tool", "skills[0].preload"]);
        assert_eq!(unknown[0].suggestion.as_deref(), Some("enabled"));
        assert_eq!(unknown[1].suggestion.as_deref(), Some("enable_tools"));
        assert_eq!(unknown[2].kind.as_deref(), Some("git"));
        assert!(unknown[2].to_string().contains("an entry of type \"git\" has no such key"), "{}", unknown[2]);
    }

    #[test]
    fn the_schema_is_closed_and_self_contained() {
        let schema = schema();
        let defs = schema["$defs"].as_object().unwrap();
        assert_eq!(schema["$defs"]["AgentSpec"]["additionalProperties"], false);
        assert_eq!(schema["$defs"]["McpServer"]["unevaluatedProperties"], false);
        // ModelParams passes unknown sampling parameters on to providers.
        assert_ne!(schema["$defs"]["ModelParams"]["additionalProperties"], false);
        let text = schema.to_string();
        assert!(!text.contains("#/components/"));
        let mut names = Vec::new();
        rewrite_refs(&mut schema.clone(), &mut names);
        assert!(names.iter().all(|name| defs.contains_key(name)), "{names:?}");
    }

    #[test]
    fn close_keys_are_suggested_and_far_ones_are_not() {
        let known = ["instructions".to_owned(), "model".to_owned(), "mcp_servers".to_owned()];
        assert_eq!(closest("instrucions", &known).as_deref(), Some("instructions"));
        assert_eq!(closest("mcp-servers", &known).as_deref(), Some("mcp_servers"));
        assert_eq!(closest("modle", &known).as_deref(), Some("model"));
        assert_eq!(closest("tools", &known), None);
    }
}
