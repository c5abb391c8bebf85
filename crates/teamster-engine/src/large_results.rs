//! Large tool results: the model gets a preview and a built-in tool to read further ranges.
//!
//! A tool result is stored whole (its `tool.response` event carries all of it, and the
//! conversation keeps it), but a request to the model carries only its first
//! [`PREVIEW_CHARS`] characters and a note. The note names [`READ_TOOL_RESULT`], with which the
//! model reads any range of the whole text. When the turn has a place for files
//! ([`ResultFiles`]: the session's sandbox), each large result is also kept there as it
//! arrives, and the note names the file, so the model can search it with code. Previews are a
//! pure function of the result (and of where files go), so a history rebuilt from events
//! previews exactly as the live turn did.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::Deserialize;
use teamster_protocol::event::ToolInfo;
use teamster_tools::{Tool, ToolAnnotations, ToolGate, ToolOutput, ToolSource};

use crate::usage::estimate_tokens;

/// The built-in tool that reads a range of a large tool result.
pub const READ_TOOL_RESULT: &str = "read_tool_result";
/// Results estimated above this many tokens are previewed, unless the agent says otherwise.
pub const DEFAULT_LARGE_RESULT_TOKENS: u64 = 4_000;
/// How many characters of a large result the preview shows.
pub const PREVIEW_CHARS: usize = 4_000;
/// The most characters one read returns.
pub const MAX_READ_CHARS: usize = 8_000;

/// Where the whole of each large tool result is also kept: a place the model can read with
/// its own tools, such as a file of the session's sandbox.
#[async_trait]
pub trait ResultFiles: Send + Sync {
    /// Where the result of `tool_call_id` is kept, as the model names it; a pure function.
    fn path(&self, tool_call_id: &str) -> String;

    /// Keeps a large result at [`ResultFiles::path`].
    async fn keep(&self, tool_call_id: &str, content: &str) -> Result<(), String>;
}

/// Whether a result is large enough to be previewed.
pub(crate) fn is_large(content: &str, threshold_tokens: u64) -> bool {
    estimate_tokens(content) > threshold_tokens
}

/// The preview of a result, or `None` when it is small enough to send whole. `file` is where
/// the whole result is also kept, if anywhere.
pub(crate) fn preview(tool_call_id: &str, content: &str, threshold_tokens: u64, file: Option<String>) -> Option<(String, u64)> {
    if !is_large(content, threshold_tokens) {
        return None;
    }
    let total = content.chars().count();
    let head = prefix_chars(content, PREVIEW_CHARS);
    let kept = file.map(|path| format!(" The whole result is also in the file {path}, to search or read with commands.")).unwrap_or_default();
    let note = format!(
        "\n\n[This tool result is {total} characters long; only the first {PREVIEW_CHARS} are shown. \
         Call {READ_TOOL_RESULT} with tool_call_id \"{tool_call_id}\", an offset and a length \
         (in characters, at most {MAX_READ_CHARS} a call) to read any other part.{kept}]"
    );
    let note_tokens = estimate_tokens(&note);
    Some((format!("{head}{note}"), note_tokens))
}

/// The first `count` characters of `text`.
fn prefix_chars(text: &str, count: usize) -> &str {
    match text.char_indices().nth(count) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// The full text of every large result of a turn, by tool call id: what [`READ_TOOL_RESULT`]
/// reads. It outlives compaction, which may summarise a result's message away.
#[derive(Default)]
pub(crate) struct LargeResults {
    results: Mutex<HashMap<String, Arc<str>>>,
    /// Where large results are also kept as files, if anywhere.
    pub files: Option<Arc<dyn ResultFiles>>,
}

impl LargeResults {
    pub fn with_files(files: Option<Arc<dyn ResultFiles>>) -> LargeResults {
        LargeResults { results: Mutex::default(), files }
    }

    /// Where the result of `tool_call_id` is kept as a file, if large results are.
    pub fn file_path(&self, tool_call_id: &str) -> Option<String> {
        self.files.as_ref().map(|files| files.path(tool_call_id))
    }

    /// Keeps a result that has just arrived as a file, if it is large and files are kept. A
    /// file that cannot be written is logged: the preview and [`READ_TOOL_RESULT`] still work.
    pub async fn keep_file(&self, tool_call_id: &str, content: &str, threshold_tokens: Option<u64>) {
        let (Some(files), Some(threshold)) = (&self.files, threshold_tokens) else { return };
        if is_large(content, threshold)
            && let Err(error) = files.keep(tool_call_id, content).await
        {
            tracing::warn!(tool_call_id, %error, "a large tool result could not be kept as a file");
        }
    }

    pub fn insert(&self, tool_call_id: &str, content: &str) {
        let mut results = self.results.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        results.entry(tool_call_id.to_owned()).or_insert_with(|| Arc::from(content));
    }

    fn get(&self, tool_call_id: &str) -> Option<Arc<str>> {
        self.results.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(tool_call_id).cloned()
    }
}

#[derive(Deserialize)]
struct ReadArguments {
    tool_call_id: String,
    #[serde(default)]
    offset: usize,
    #[serde(default)]
    length: Option<usize>,
}

#[async_trait]
impl ToolSource for LargeResults {
    async fn list(&self) -> Result<Vec<Tool>, teamster_tools::Error> {
        Ok(vec![Tool {
            name: READ_TOOL_RESULT.to_owned(),
            description: format!(
                "Reads part of a tool result that was too large to show whole. Offsets and \
                 lengths count characters; one call returns at most {MAX_READ_CHARS}."
            ),
            input_schema: serde_json::json!({
                "type": "object",
                "properties": {
                    "tool_call_id": {"type": "string", "description": "The id of the tool call whose result to read."},
                    "offset": {"type": "integer", "minimum": 0, "description": "The first character to read."},
                    "length": {"type": "integer", "minimum": 1, "maximum": MAX_READ_CHARS, "description": "How many characters to read."}
                },
                "required": ["tool_call_id", "offset"]
            }),
            info: ToolInfo::System { name: READ_TOOL_RESULT.to_owned() },
            annotations: ToolAnnotations { read_only: true, destructive: false, idempotent: true },
            gate: ToolGate::None,
        }])
    }

    async fn call(&self, _name: &str, arguments: &str) -> ToolOutput {
        let arguments: ReadArguments = match serde_json::from_str(arguments) {
            Ok(arguments) => arguments,
            Err(error) => return ToolOutput::error(format!("Invalid arguments: {error}.")),
        };
        let Some(content) = self.get(&arguments.tool_call_id) else {
            return ToolOutput::error(format!(
                "There is no large tool result with tool_call_id {:?}.",
                arguments.tool_call_id
            ));
        };
        let length = arguments.length.unwrap_or(MAX_READ_CHARS).clamp(1, MAX_READ_CHARS);
        let total = content.chars().count();
        if arguments.offset >= total {
            return ToolOutput::error(format!(
                "The offset {} is past the end: the result has {total} characters.",
                arguments.offset
            ));
        }
        let range: String = content.chars().skip(arguments.offset).take(length).collect();
        let end = arguments.offset + range.chars().count();
        ToolOutput::ok(format!("[Characters {}..{end} of {total}]\n{range}", arguments.offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_results_are_sent_whole_and_large_ones_previewed() {
        assert!(preview("c1", "short", 10, None).is_none());
        let big = "é".repeat(20_000);
        let (shown, note_tokens) = preview("c1", &big, 10, None).unwrap();
        assert!(shown.starts_with(&"é".repeat(PREVIEW_CHARS)));
        assert!(shown.contains("20000 characters long") && shown.contains("\"c1\""));
        assert!(!shown.contains("in the file"));
        assert!(note_tokens > 0 && (note_tokens as usize) < shown.len());
        let (kept, _) = preview("c1", &big, 10, Some("/workspace/.tool-results/c1.txt".into())).unwrap();
        assert!(kept.ends_with("The whole result is also in the file /workspace/.tool-results/c1.txt, to search or read with commands.]"));
    }

    #[tokio::test]
    async fn reads_any_range_by_characters() {
        let results = LargeResults::default();
        let text: String = (0..30_000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        results.insert("c1", &text);
        let read = results.call(READ_TOOL_RESULT, r#"{"tool_call_id":"c1","offset":26000,"length":5}"#).await;
        assert_eq!(read, ToolOutput::ok("[Characters 26000..26005 of 30000]\nabcde"));
        let capped = results.call(READ_TOOL_RESULT, r#"{"tool_call_id":"c1","offset":0,"length":99999}"#).await;
        assert!(capped.content.starts_with(&format!("[Characters 0..{MAX_READ_CHARS} of 30000]")));
        let past = results.call(READ_TOOL_RESULT, r#"{"tool_call_id":"c1","offset":30000}"#).await;
        assert!(past.is_error && past.content.contains("past the end"));
        let unknown = results.call(READ_TOOL_RESULT, r#"{"tool_call_id":"zz","offset":0}"#).await;
        assert!(unknown.is_error && unknown.content.contains("\"zz\""));
        let bad = results.call(READ_TOOL_RESULT, r#"{"offset":0}"#).await;
        assert!(bad.is_error && bad.content.contains("tool_call_id"));
    }
}
