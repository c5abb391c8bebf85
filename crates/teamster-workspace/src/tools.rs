//! [`FileTools`]: the file tools on one session's sandbox, what the model sees of each and what
//! a call does.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use teamster_protocol::ToolInfo;
use teamster_sandbox::{FileKind, SandboxError, SandboxProvider};
use teamster_tools::{Tool, ToolAnnotations, ToolGate, ToolOutput, ToolSource};
use tokio::io::AsyncReadExt;

use crate::glob::Glob;
use crate::text::{as_text, cut_line};

/// The tools that only read (the `read` category of the permission policy).
pub const READ_TOOLS: [&str; 4] = ["read_file", "list_files", "glob", "grep"];
/// The tools that change files (the `edit` category).
pub const EDIT_TOOLS: [&str; 2] = ["write_file", "edit_file"];
/// Every file tool, in the order the model sees them.
pub const FILE_TOOLS: [&str; 6] = ["read_file", "write_file", "edit_file", "list_files", "glob", "grep"];

/// The largest file `read_file`, `edit_file` and `grep` read.
const MAX_READ_BYTES: u64 = 256 * 1024;
/// The lines `read_file` shows when the call names no limit.
const DEFAULT_LINES: usize = 2000;
/// `list_files`'s default and greatest depth, and the most entries it lists.
const DEFAULT_DEPTH: u32 = 2;
const MAX_DEPTH: u32 = 10;
const MAX_LISTED: usize = 1000;
/// How deep and how far `glob` and `grep` walk, and the most paths `glob` answers.
const SEARCH_DEPTH: u32 = 32;
const MAX_WALKED: usize = 20_000;
const MAX_GLOBBED: usize = 500;
/// `grep`'s default and greatest number of matching lines, and the most bytes it reads in all.
const DEFAULT_MATCHES: usize = 100;
const MAX_MATCHES: usize = 1000;
const MAX_GREP_BYTES: u64 = 32 * 1024 * 1024;

/// The file tools on the provisioned sandbox `sandbox_id`.
pub struct FileTools {
    provider: Arc<dyn SandboxProvider>,
    sandbox_id: String,
}

impl FileTools {
    pub fn new(provider: Arc<dyn SandboxProvider>, sandbox_id: String) -> FileTools {
        FileTools { provider, sandbox_id }
    }

    /// The tools as the model sees them.
    pub fn definitions() -> Vec<Tool> {
        let path = json!({"type": "string", "description": "A path relative to /workspace, or absolute under /workspace or /tmp."});
        let directory = json!({"type": "string", "description": "A directory relative to /workspace, or absolute under /workspace or /tmp; /workspace when left out."});
        vec![
            tool(
                "read_file",
                "Reads a text file of the workspace, each line numbered (from 1). Give `offset` (the first line) and `limit` (how many lines) to read part of a long file. Binary files and files over 256 KiB are refused.",
                json!({"path": path, "offset": {"type": "integer", "minimum": 1}, "limit": {"type": "integer", "minimum": 1}}),
                &["path"],
                true,
            ),
            tool(
                "write_file",
                "Writes a file of the workspace whole (creating it and its directories, or replacing it).",
                json!({"path": path, "content": {"type": "string", "description": "The file's whole new content."}}),
                &["path", "content"],
                false,
            ),
            tool(
                "edit_file",
                "Replaces one exact piece of a text file: `old_string` must occur exactly once in the file (give more of the surrounding lines when it occurs more than once).",
                json!({"path": path, "old_string": {"type": "string"}, "new_string": {"type": "string"}}),
                &["path", "old_string", "new_string"],
                false,
            ),
            tool(
                "list_files",
                "Lists a directory's files and directories with their sizes, to `depth` levels (2 when left out, at most 10).",
                json!({"path": directory, "depth": {"type": "integer", "minimum": 1, "maximum": MAX_DEPTH}}),
                &[],
                true,
            ),
            tool(
                "glob",
                "Finds files whose path (relative to `path`) matches a glob pattern: `*`, `**` for any directories, `?`, `[abc]`, `{a,b}`. For example `**/*.rs`.",
                json!({"pattern": {"type": "string"}, "path": directory}),
                &["pattern"],
                true,
            ),
            tool(
                "grep",
                "Searches text files for lines matching a regular expression (Rust syntax), under `path`, optionally only in files matching the glob `include`. Answers each matching line with its file and line number.",
                json!({"pattern": {"type": "string"}, "path": directory, "include": {"type": "string"}, "max_matches": {"type": "integer", "minimum": 1, "maximum": MAX_MATCHES}}),
                &["pattern"],
                true,
            ),
        ]
    }

    /// Runs the call of the tool `name` with its arguments as the model wrote them.
    async fn dispatch(&self, name: &str, raw: &str) -> Result<Value, String> {
        match name {
            "read_file" => self.read_file(arguments(name, raw)?).await,
            "write_file" => self.write_file(arguments(name, raw)?).await,
            "edit_file" => self.edit_file(arguments(name, raw)?).await,
            "list_files" => self.list_files(arguments(name, raw)?).await,
            "glob" => self.glob(arguments(name, raw)?).await,
            "grep" => self.grep(arguments(name, raw)?).await,
            other => Err(format!("unknown tool {other:?}")),
        }
    }

    async fn read_file(&self, arguments: ReadArguments) -> Result<Value, String> {
        let text = self.read_text(&arguments.path).await?;
        let lines: Vec<&str> = text.lines().collect();
        let first = arguments.offset.unwrap_or(1).max(1);
        let limit = arguments.limit.unwrap_or(DEFAULT_LINES).max(1);
        if first > lines.len().max(1) {
            return Err(format!("{} has {} lines; offset {first} is past its end", arguments.path, lines.len()));
        }
        let shown: Vec<String> =
            lines.iter().enumerate().skip(first - 1).take(limit).map(|(index, line)| format!("{:>6}\t{}", index + 1, cut_line(line))).collect();
        let last = first - 1 + shown.len();
        Ok(json!({
            "path": arguments.path,
            "content": shown.join("\n"),
            "lines": [first, last],
            "total_lines": lines.len(),
            "truncated": last < lines.len(),
        }))
    }

    async fn write_file(&self, arguments: WriteArguments) -> Result<Value, String> {
        self.provider.write_file(&self.sandbox_id, &arguments.path, arguments.content.as_bytes()).await.map_err(|error| failed("write", error))?;
        Ok(json!({"path": arguments.path, "bytes": arguments.content.len()}))
    }

    async fn edit_file(&self, arguments: EditArguments) -> Result<Value, String> {
        if arguments.old_string.is_empty() {
            return Err("old_string is empty: give the exact text to replace (write_file writes a file whole)".to_owned());
        }
        let text = self.read_text(&arguments.path).await?;
        let found = text.matches(&arguments.old_string).count();
        match found {
            0 => return Err(format!("old_string does not occur in {}: nothing was changed", arguments.path)),
            1 => {}
            more => {
                return Err(format!(
                    "old_string occurs {more} times in {}: nothing was changed; give more of the surrounding text so it occurs once",
                    arguments.path
                ));
            }
        }
        let at = text.find(&arguments.old_string).unwrap_or(0);
        let line = text[..at].matches('\n').count() + 1;
        let edited = text.replacen(&arguments.old_string, &arguments.new_string, 1);
        self.provider.write_file(&self.sandbox_id, &arguments.path, edited.as_bytes()).await.map_err(|error| failed("write", error))?;
        Ok(json!({"path": arguments.path, "line": line, "bytes": edited.len()}))
    }

    async fn list_files(&self, arguments: ListArguments) -> Result<Value, String> {
        let depth = arguments.depth.unwrap_or(DEFAULT_DEPTH).clamp(1, MAX_DEPTH);
        let path = arguments.path.unwrap_or_default();
        let listing = self.provider.list_files(&self.sandbox_id, &path, depth, MAX_LISTED).await.map_err(|error| failed("list", error))?;
        let entries: Vec<Value> = listing
            .entries
            .iter()
            .map(|entry| match entry.kind {
                FileKind::File => json!({"path": entry.path, "type": "file", "bytes": entry.bytes}),
                kind => json!({"path": entry.path, "type": kind.as_str()}),
            })
            .collect();
        Ok(json!({"entries": entries, "truncated": listing.truncated}))
    }

    async fn glob(&self, arguments: GlobArguments) -> Result<Value, String> {
        let glob = Glob::new(&arguments.pattern)?;
        let (files, walked_all) = self.files_matching(arguments.path.as_deref(), Some(&glob)).await?;
        let matched: Vec<Value> = files.iter().take(MAX_GLOBBED).map(|(path, bytes)| json!({"path": path, "bytes": bytes})).collect();
        Ok(json!({"files": matched, "truncated": files.len() > MAX_GLOBBED || !walked_all}))
    }

    async fn grep(&self, arguments: GrepArguments) -> Result<Value, String> {
        let pattern = regex::RegexBuilder::new(&arguments.pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|error| format!("the pattern is not a regular expression this tool takes: {error}"))?;
        let include = arguments.include.as_deref().map(Glob::new).transpose()?;
        let max_matches = arguments.max_matches.unwrap_or(DEFAULT_MATCHES).clamp(1, MAX_MATCHES);
        let (files, walked_all) = self.files_matching(arguments.path.as_deref(), include.as_ref()).await?;
        let mut matches = Vec::new();
        let mut read = 0u64;
        let mut skipped = 0usize;
        'files: for (path, bytes) in files {
            if bytes > MAX_READ_BYTES || read + bytes > MAX_GREP_BYTES {
                skipped += 1;
                continue;
            }
            read += bytes;
            let Ok(contents) = self.provider.read_file(&self.sandbox_id, &path).await else { continue };
            let Ok(text) = as_text(&contents) else { continue };
            for (index, line) in text.lines().enumerate() {
                if pattern.is_match(line) {
                    if matches.len() == max_matches {
                        break 'files;
                    }
                    matches.push(json!({"path": path, "line": index + 1, "text": cut_line(line)}));
                }
            }
        }
        let truncated = matches.len() == max_matches || !walked_all;
        Ok(json!({"matches": matches, "truncated": truncated, "files_skipped_as_too_large": skipped}))
    }

    /// The regular files under `path` (the workspace when `None`) whose path relative to it
    /// matches `glob` (all when `None`), with their sizes; and whether the walk saw everything.
    async fn files_matching(&self, path: Option<&str>, glob: Option<&Glob>) -> Result<(Vec<(String, u64)>, bool), String> {
        let path = path.unwrap_or_default();
        let listing = self.provider.list_files(&self.sandbox_id, path, SEARCH_DEPTH, MAX_WALKED).await.map_err(|error| failed("search", error))?;
        let base = listing.entries.first().map(|entry| parent_of(&entry.path, entry.depth)).unwrap_or_default();
        let files = listing
            .entries
            .into_iter()
            .filter(|entry| entry.kind == FileKind::File)
            .filter(|entry| {
                let relative = entry.path.strip_prefix(&base).unwrap_or(&entry.path).trim_start_matches('/');
                glob.is_none_or(|glob| glob.matches(relative))
            })
            .map(|entry| (entry.path, entry.bytes))
            .collect();
        Ok((files, !listing.truncated))
    }

    /// A text file's content, refused when it is too large or not text.
    async fn read_text(&self, path: &str) -> Result<String, String> {
        let mut opened = self.provider.open_file(&self.sandbox_id, path).await.map_err(|error| failed("read", error))?;
        if opened.len > MAX_READ_BYTES {
            return Err(format!("{path} has {} bytes, over the {MAX_READ_BYTES} bytes this tool reads; read part of it with exec (head, sed -n)", opened.len));
        }
        let mut contents = Vec::with_capacity(opened.len as usize);
        opened.reader.read_to_end(&mut contents).await.map_err(|error| format!("{path} could not be read: {error}"))?;
        match as_text(&contents) {
            Ok(text) => Ok(text.to_owned()),
            Err(why) => Err(format!("{path} is not a text file ({why}, {} bytes); the user can download it", contents.len())),
        }
    }
}

/// The directory an entry at `depth` was listed under (`/workspace/src/a.rs` at depth 1 was
/// listed under `/workspace/src`).
fn parent_of(path: &str, depth: u32) -> String {
    let mut parent = path;
    for _ in 0..depth {
        parent = parent.rsplit_once('/').map_or("", |(head, _)| head);
    }
    parent.to_owned()
}

/// A provider's refusal as the model reads it.
fn failed(what: &str, error: SandboxError) -> String {
    match error {
        SandboxError::InvalidPath { .. } | SandboxError::NoSuchFile(_) | SandboxError::TooLarge { .. } | SandboxError::InvalidRequest(_) => {
            error.to_string()
        }
        SandboxError::QuotaExceeded { .. } => error.to_string(),
        other => format!("could not {what}: {other}"),
    }
}

fn tool(name: &str, description: &str, properties: Value, required: &[&str], read_only: bool) -> Tool {
    Tool {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema: json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false}),
        info: ToolInfo::System { name: name.to_owned() },
        annotations: ToolAnnotations { read_only, destructive: false, idempotent: read_only },
        gate: ToolGate::None,
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArguments {
    path: String,
    #[serde(default)]
    offset: Option<usize>,
    #[serde(default)]
    limit: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArguments {
    path: String,
    content: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArguments {
    path: String,
    old_string: String,
    new_string: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArguments {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    depth: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GlobArguments {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrepArguments {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    include: Option<String>,
    #[serde(default)]
    max_matches: Option<usize>,
}

/// Parses a call's arguments, for the model when they do not fit.
fn arguments<T: serde::de::DeserializeOwned>(name: &str, arguments: &str) -> Result<T, String> {
    serde_json::from_str(arguments).map_err(|error| format!("invalid arguments for {name}: {error}"))
}

#[async_trait]
impl ToolSource for FileTools {
    async fn list(&self) -> Result<Vec<Tool>, teamster_tools::Error> {
        Ok(FileTools::definitions())
    }

    async fn call(&self, name: &str, raw: &str) -> ToolOutput {
        match self.dispatch(name, raw).await {
            Ok(value) => ToolOutput::ok(value.to_string()),
            Err(message) => ToolOutput::error(message),
        }
    }
}
