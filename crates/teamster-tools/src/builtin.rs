//! Built-in tools that need no server: `get_current_datetime`.

use async_trait::async_trait;
use teamster_protocol::ToolInfo;

use crate::{Error, Tool, ToolAnnotations, ToolGate, ToolOutput, ToolSource};

/// The built-in tools, offered to every agent.
#[derive(Clone, Debug, Default)]
pub struct Builtins;

const GET_CURRENT_DATETIME: &str = "get_current_datetime";

#[async_trait]
impl ToolSource for Builtins {
    async fn list(&self) -> Result<Vec<Tool>, Error> {
        Ok(vec![Tool {
            name: GET_CURRENT_DATETIME.to_owned(),
            description: "Returns the current date and time in UTC as an RFC 3339 timestamp."
                .to_owned(),
            input_schema: serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false}),
            info: ToolInfo::System { name: GET_CURRENT_DATETIME.to_owned() },
            annotations: ToolAnnotations { read_only: true, destructive: false, idempotent: true },
            gate: ToolGate::None,
        }])
    }

    async fn call(&self, name: &str, arguments: &str) -> ToolOutput {
        if name != GET_CURRENT_DATETIME {
            return ToolOutput::error(format!("unknown tool {name:?}"));
        }
        if !arguments.trim().is_empty()
            && !matches!(serde_json::from_str::<serde_json::Value>(arguments), Ok(serde_json::Value::Object(_)))
        {
            return ToolOutput::error("arguments must be a JSON object");
        }
        let now = time::OffsetDateTime::now_utc();
        ToolOutput::ok(
            now.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn datetime_tool_answers_and_rejects_bad_input() {
        let tools = Builtins.list().await.unwrap();
        assert_eq!(tools[0].name, GET_CURRENT_DATETIME);
        let output = Builtins.call(GET_CURRENT_DATETIME, "{}").await;
        assert!(!output.is_error);
        assert!(time::OffsetDateTime::parse(&output.content, &time::format_description::well_known::Rfc3339).is_ok());
        assert!(Builtins.call(GET_CURRENT_DATETIME, "[1]").await.is_error);
        assert!(Builtins.call("nope", "{}").await.is_error);
    }
}
