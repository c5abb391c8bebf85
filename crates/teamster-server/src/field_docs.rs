//! Descriptions of the fields every kind of object shares (`id`, `created_at`, `thread_id`, a
//! `type` that has one value, a list's `data` and `pagination`, ...), added to the OpenAPI
//! document's schemas where the type's own doc comment gave the field none, so each of the many
//! objects that carry them need not repeat the same sentence. Other fields are described where
//! they are declared, in `teamster-protocol` (an optional field's doc comment, which the
//! generator leaves on the reference inside its `oneOf`, is lifted to the field); `coverage`
//! counts how many are, and a test holds the document to `MIN_COVERAGE`.

#[cfg(test)]
use serde_json::Value;
use utoipa::openapi::{OpenApi, RefOr, Schema};

/// The least share of schema fields the document describes.
#[cfg(test)]
const MIN_COVERAGE: f64 = 0.9;

/// Describes the shared fields of every schema that left them undescribed.
pub(crate) fn describe_shared_fields(api: &mut OpenApi) {
    let Some(components) = api.components.as_mut() else { return };
    for (name, schema) in components.schemas.iter_mut() {
        if let RefOr::T(schema) = schema {
            describe_schema(name, schema);
        }
    }
}

/// How many fields (properties) the schemas of a document have, and how many have a description.
#[cfg(test)]
fn coverage(document: &Value) -> (usize, usize) {
    let mut counts = (0, 0);
    if let Some(schemas) = document.pointer("/components/schemas").and_then(Value::as_object) {
        for schema in schemas.values() {
            count_schema(schema, &mut counts);
        }
    }
    counts
}

#[cfg(test)]
fn count_schema(schema: &Value, counts: &mut (usize, usize)) {
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for property in properties.values() {
            counts.0 += 1;
            if property.get("description").and_then(Value::as_str).is_some_and(|text| !text.trim().is_empty()) {
                counts.1 += 1;
            }
        }
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        for variant in schema.get(key).and_then(Value::as_array).into_iter().flatten() {
            count_schema(variant, counts);
        }
    }
}

/// Describes the shared fields of one schema (and of each of its variants).
fn describe_schema(name: &str, schema: &mut Schema) {
    let variants = match schema {
        Schema::Object(object) => {
            for (field, property) in object.properties.iter_mut() {
                if description_of(property).is_some_and(|text| !text.trim().is_empty()) {
                    continue;
                }
                if let Some(description) = nested_description(property) {
                    set_description(property, description);
                } else if let Some(description) = shared_description(name, field, only_value(property)) {
                    set_description(property, description);
                }
            }
            return;
        }
        Schema::OneOf(one_of) => &mut one_of.items,
        Schema::AllOf(all_of) => &mut all_of.items,
        Schema::AnyOf(any_of) => &mut any_of.items,
        _ => return,
    };
    for variant in variants {
        if let RefOr::T(variant) = variant {
            describe_schema(name, variant);
        }
    }
}

/// A property's description, if it has one.
fn description_of(property: &RefOr<Schema>) -> Option<&str> {
    match property {
        RefOr::Ref(reference) => Some(reference.description.as_str()).filter(|text| !text.is_empty()),
        RefOr::T(Schema::Object(object)) => object.description.as_deref(),
        RefOr::T(Schema::Array(array)) => array.description.as_deref(),
        RefOr::T(Schema::OneOf(one_of)) => one_of.description.as_deref(),
        RefOr::T(Schema::AllOf(all_of)) => all_of.description.as_deref(),
        RefOr::T(Schema::AnyOf(any_of)) => any_of.description.as_deref(),
        RefOr::T(_) => None,
    }
}

fn set_description(property: &mut RefOr<Schema>, description: String) {
    match property {
        RefOr::Ref(reference) => reference.description = description,
        RefOr::T(Schema::Object(object)) => object.description = Some(description),
        RefOr::T(Schema::Array(array)) => array.description = Some(description),
        RefOr::T(Schema::OneOf(one_of)) => one_of.description = Some(description),
        RefOr::T(Schema::AllOf(all_of)) => all_of.description = Some(description),
        RefOr::T(Schema::AnyOf(any_of)) => any_of.description = Some(description),
        RefOr::T(_) => {}
    }
}

/// The doc comment of an optional field whose type has a schema of its own: the generator puts
/// it on the reference inside `oneOf: [null, $ref]`, where readers of the field do not look.
fn nested_description(property: &RefOr<Schema>) -> Option<String> {
    let RefOr::T(Schema::OneOf(one_of)) = property else { return None };
    one_of.items.iter().find_map(|item| match item {
        RefOr::Ref(reference) if !reference.description.trim().is_empty() => Some(reference.description.clone()),
        _ => None,
    })
}

/// The one value a property may have (an `enum` of one string), if so.
fn only_value(property: &RefOr<Schema>) -> Option<&str> {
    match property {
        RefOr::T(Schema::Object(object)) => match object.enum_values.as_deref() {
            Some([serde_json::Value::String(only)]) => Some(only.as_str()),
            _ => None,
        },
        _ => None,
    }
}

/// What a shared field means in the schema `name`; `None` for a field that is not shared.
fn shared_description(name: &str, field: &str, only_value: Option<&str>) -> Option<String> {
    let list = name.starts_with("Page_");
    Some(match field {
        "type" => format!("Always `{}`: the kind of this object.", only_value?),
        _ if only_value.is_some() => format!("Always `{}`.", only_value?),
        "id" => "This object's id.".to_owned(),
        "created_at" => "When it was created (RFC 3339, UTC, milliseconds).".to_owned(),
        "updated_at" => "When it last changed (RFC 3339, UTC, milliseconds).".to_owned(),
        "data" if list => "This page's items, in the list's order.".to_owned(),
        "data" if name.starts_with("Data_") => "The requested object or objects.".to_owned(),
        "pagination" if list => "The page's size and the tokens of the pages after and before it.".to_owned(),
        "thread_id" => {
            "The thread it belongs to: `main` for the turn's main thread, else the id of a sub-agent's thread.".to_owned()
        }
        "tool_call_id" => "The id of the tool call it concerns.".to_owned(),
        "turn_id" => "The id of the turn it belongs to.".to_owned(),
        "session_id" => "The id of the session it belongs to.".to_owned(),
        "previous_turn_id" => "The id of the session's turn before this one; absent for the first turn.".to_owned(),
        "created_by_subject" => "Who created it.".to_owned(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_describes_most_of_its_fields() {
        let document = serde_json::to_value(crate::openapi::document()).expect("the document serialises");
        let (fields, described) = coverage(&document);
        let share = described as f64 / fields as f64;
        let mut undescribed = Vec::new();
        if let Some(schemas) = document.pointer("/components/schemas").and_then(Value::as_object) {
            for (name, schema) in schemas {
                collect_undescribed(name, schema, &mut undescribed);
            }
        }
        assert!(
            fields > 400 && share >= MIN_COVERAGE,
            "{described} of {fields} schema fields are described ({:.1}%), under {:.0}%; undescribed: {}",
            share * 100.0,
            MIN_COVERAGE * 100.0,
            undescribed.join(", ")
        );
    }

    fn collect_undescribed(name: &str, schema: &Value, out: &mut Vec<String>) {
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            for (field, property) in properties {
                if property.get("description").is_none() {
                    out.push(format!("{name}.{field}"));
                }
            }
        }
        for key in ["oneOf", "anyOf", "allOf"] {
            for variant in schema.get(key).and_then(Value::as_array).into_iter().flatten() {
                collect_undescribed(name, variant, out);
            }
        }
    }

    #[test]
    fn shared_fields_are_described_only_where_nothing_was_said() {
        let mut schema: Schema = serde_json::from_value(serde_json::json!({"type": "object", "properties": {
            "id": {"type": "string"},
            "type": {"type": "string", "enum": ["turn.done"]},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "created_at": {"type": "string", "description": "Said by the type."},
        }}))
        .unwrap();
        describe_schema("TurnDone", &mut schema);
        let schema = serde_json::to_value(&schema).unwrap();
        assert_eq!(schema["properties"]["id"]["description"], "This object's id.");
        assert_eq!(schema["properties"]["type"]["description"], "Always `turn.done`: the kind of this object.");
        assert!(schema["properties"]["kind"].get("description").is_none());
        assert_eq!(schema["properties"]["created_at"]["description"], "Said by the type.");
    }

}
