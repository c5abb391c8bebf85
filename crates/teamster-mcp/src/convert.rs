//! MCP shapes into the tool seam's: `tools/list` entries into [`Tool`]s, `tools/call` results
//! into [`ToolOutput`]s bounded for the model.

use std::fmt::Write as _;

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use teamster_protocol::ToolInfo;
use teamster_tools::{Tool, ToolAnnotations, ToolGate, ToolOutput};

use crate::ListedTool;

/// Maps one listed MCP tool, keeping its entry as given. Missing hints take the MCP defaults in
/// the tool: not read-only, destructive unless read-only, not idempotent.
pub(crate) fn listed(server_id: &str, server_name: &str, tool: rmcp::model::Tool) -> ListedTool {
    // rmcp's model writes back exactly the fields the server set.
    let entry = serde_json::to_value(&tool).unwrap_or_default();
    let hints = tool.annotations.as_ref();
    let read_only = hints.and_then(|hints| hints.read_only_hint).unwrap_or(false);
    let destructive = !read_only && hints.and_then(|hints| hints.destructive_hint).unwrap_or(true);
    let idempotent = hints.and_then(|hints| hints.idempotent_hint).unwrap_or(false);
    let description = match (tool.description, tool.title) {
        (Some(description), _) => description.into_owned(),
        (None, Some(title)) => title,
        (None, None) => String::new(),
    };
    let name = tool.name.into_owned();
    let tool = Tool {
        info: ToolInfo::Mcp {
            server_id: server_id.to_owned(),
            server_name: server_name.to_owned(),
            name: name.clone(),
        },
        name,
        description,
        input_schema: serde_json::Value::Object(tool.input_schema.as_ref().clone()),
        annotations: ToolAnnotations { read_only, destructive, idempotent },
        gate: ToolGate::None,
    };
    ListedTool { entry, tool }
}

/// Renders a call's result as text: text blocks joined by newlines, the structured content as
/// JSON when there is no text, short placeholders for images, audio and resources, cut to
/// `max_bytes`.
pub(crate) fn output(result: CallToolResult, max_bytes: usize) -> ToolOutput {
    let mut parts: Vec<String> = Vec::with_capacity(result.content.len());
    let mut has_text = false;
    for block in &result.content {
        match block {
            ContentBlock::Text(text) => {
                has_text = true;
                parts.push(text.text.clone());
            }
            ContentBlock::Image(image) => {
                parts.push(format!("[image: {}, {} bytes base64]", image.mime_type, image.data.len()));
            }
            ContentBlock::Audio(audio) => {
                parts.push(format!("[audio: {}, {} bytes base64]", audio.mime_type, audio.data.len()));
            }
            ContentBlock::Resource(embedded) => parts.push(match &embedded.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    has_text = true;
                    format!("[resource {uri}]\n{text}")
                }
                ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => format!(
                    "[resource {uri}: {}, {} bytes base64]",
                    mime_type.as_deref().unwrap_or("binary"),
                    blob.len()
                ),
                _ => "[resource]".to_owned(),
            }),
            ContentBlock::ResourceLink(link) => parts.push(format!("[resource link: {}]", link.uri)),
            _ => parts.push("[unsupported content]".to_owned()),
        }
    }
    if !has_text && let Some(structured) = &result.structured_content {
        parts.insert(0, structured.to_string());
    }
    let content = truncate(parts.join("\n"), max_bytes);
    ToolOutput { content, is_error: result.is_error.unwrap_or(false) }
}

/// Cuts `text` to at most `max_bytes` (at a character boundary) and says so.
pub(crate) fn truncate(mut text: String, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text;
    }
    let total = text.len();
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    let _ = write!(text, "\n[output truncated: {total} bytes, {max_bytes} shown]");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_characters_whole_and_says_so() {
        assert_eq!(truncate("short".to_owned(), 5), "short");
        assert_eq!(truncate("héllo".to_owned(), 2), "h\n[output truncated: 6 bytes, 2 shown]");
    }

    #[test]
    fn results_render_each_content_kind() {
        let result: CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [
                {"type": "text", "text": "caption"},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///a.bin", "blob": "AAAA"}},
                {"type": "resource_link", "uri": "file:///b.txt", "name": "b"}
            ],
            "structuredContent": {"ignored": "because there is text"},
            "isError": true
        }))
        .unwrap();
        assert_eq!(
            output(result, 1 << 20),
            ToolOutput::error(concat!(
                "caption\n",
                "[image: image/png, 4 bytes base64]\n",
                "[resource file:///a.bin: binary, 4 bytes base64]\n",
                "[resource link: file:///b.txt]"
            ))
        );

        let structured: CallToolResult =
            serde_json::from_value(serde_json::json!({"content": [], "structuredContent": {"sum": 3}}))
                .unwrap();
        assert_eq!(output(structured, 1 << 20), ToolOutput::ok(r#"{"sum":3}"#));
    }

    #[test]
    fn missing_hints_take_the_mcp_defaults_in_the_tool_and_stay_missing_in_the_entry() {
        let given = serde_json::json!({
            "name": "t", "title": "Title only", "inputSchema": {"type": "object"},
            "annotations": {"title": "Annotated title", "openWorldHint": false}
        });
        let listed = listed("id", "srv", serde_json::from_value(given.clone()).unwrap());
        assert_eq!(listed.entry, given);
        let mapped = listed.tool;
        assert_eq!(mapped.description, "Title only");
        assert_eq!(
            mapped.annotations,
            ToolAnnotations { read_only: false, destructive: true, idempotent: false }
        );
        assert_eq!(
            mapped.info,
            ToolInfo::Mcp { server_id: "id".into(), server_name: "srv".into(), name: "t".into() }
        );
    }
}
