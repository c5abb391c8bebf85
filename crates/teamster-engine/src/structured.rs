//! Structured output: with `response_format` `json_object` or `json_schema`, the agent's final
//! answer must be JSON of that shape.

use teamster_protocol::agent::ResponseFormat;

/// How many times the model is asked to correct an answer that does not match the format.
pub(crate) const CORRECTIONS: u32 = 1;

/// A compiled response format.
pub(crate) enum OutputCheck {
    Object,
    Schema { name: String, validator: Box<jsonschema::Validator> },
}

impl OutputCheck {
    /// The check a response format asks for; `Ok(None)` for plain text. A schema that does
    /// not compile is an error the agent's author must fix.
    pub fn new(format: Option<&ResponseFormat>) -> Result<Option<OutputCheck>, String> {
        match format {
            None | Some(ResponseFormat::Text) => Ok(None),
            Some(ResponseFormat::JsonObject) => Ok(Some(OutputCheck::Object)),
            Some(ResponseFormat::JsonSchema { json_schema }) => {
                let Some(schema) = &json_schema.schema else {
                    return Ok(Some(OutputCheck::Object));
                };
                let validator = jsonschema::validator_for(schema).map_err(|error| {
                    format!("The response format's JSON schema {:?} is invalid: {error}.", json_schema.name)
                })?;
                Ok(Some(OutputCheck::Schema { name: json_schema.name.clone(), validator: Box::new(validator) }))
            }
        }
    }

    /// Checks an answer; the error says what is wrong, for the model or the user.
    pub fn check(&self, text: &str) -> Result<(), String> {
        let value: serde_json::Value = serde_json::from_str(text.trim())
            .map_err(|error| format!("the answer is not valid JSON ({error})"))?;
        match self {
            OutputCheck::Object if value.is_object() => Ok(()),
            OutputCheck::Object => Err("the answer is JSON but not an object".to_owned()),
            OutputCheck::Schema { name, validator } => {
                let problems: Vec<String> = validator
                    .iter_errors(&value)
                    .take(5)
                    .map(|error| {
                        let path = error.instance_path().to_string();
                        if path.is_empty() { error.to_string() } else { format!("at {path}: {error}") }
                    })
                    .collect();
                if problems.is_empty() {
                    Ok(())
                } else {
                    Err(format!("the answer does not match the schema {name:?}: {}", problems.join("; ")))
                }
            }
        }
    }

    /// What the model is told when its answer failed the check.
    pub fn correction(&self, problem: &str) -> String {
        format!(
            "Your last answer cannot be accepted: {problem}. Reply again with only the JSON value, \
             no other text and no code fences."
        )
    }
}

#[cfg(test)]
mod tests {
    use teamster_protocol::agent::JsonSchemaFormat;

    use super::*;

    fn schema_check() -> OutputCheck {
        let format = ResponseFormat::JsonSchema {
            json_schema: JsonSchemaFormat {
                name: "city".into(),
                description: None,
                schema: Some(serde_json::json!({
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "population": {"type": "integer", "minimum": 0}},
                    "required": ["name", "population"],
                    "additionalProperties": false
                })),
                strict: Some(true),
            },
        };
        OutputCheck::new(Some(&format)).unwrap().unwrap()
    }

    #[test]
    fn answers_are_checked_against_the_schema() {
        let check = schema_check();
        assert_eq!(check.check(r#" {"name":"Oslo","population":700000} "#), Ok(()));
        let missing = check.check(r#"{"name":"Oslo"}"#).unwrap_err();
        assert!(missing.contains("population") && missing.contains("\"city\""), "{missing}");
        let wrong_type = check.check(r#"{"name":"Oslo","population":"many"}"#).unwrap_err();
        assert!(wrong_type.contains("/population"), "{wrong_type}");
        assert!(check.check("Oslo has 700000 people").unwrap_err().contains("not valid JSON"));
    }

    #[test]
    fn json_object_wants_an_object_and_bad_schemas_are_reported() {
        let object = OutputCheck::new(Some(&ResponseFormat::JsonObject)).unwrap().unwrap();
        assert_eq!(object.check(r#"{"a":1}"#), Ok(()));
        assert!(object.check("[1]").is_err());
        assert!(OutputCheck::new(Some(&ResponseFormat::Text)).unwrap().is_none());
        let bad = ResponseFormat::JsonSchema {
            json_schema: JsonSchemaFormat {
                name: "bad".into(),
                description: None,
                schema: Some(serde_json::json!({"type": 12})),
                strict: None,
            },
        };
        assert!(OutputCheck::new(Some(&bad)).err().unwrap().contains("invalid"));
    }
}
