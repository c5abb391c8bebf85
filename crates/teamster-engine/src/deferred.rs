//! Deferred tools: tools the model does not see until it asks for them.
//!
//! An agent with many MCP tools would spend much of its context on their definitions, so a
//! deferred tool is left out of the definitions sent to the model. Two built-in tools stand in
//! for all of them: [`SEARCH_TOOLS`] finds deferred tools by words of their names and
//! descriptions, and [`LOAD_TOOLS`] loads some by name, which makes them callable (and their
//! definitions sent) from the next model call on, for the rest of the turn.
//!
//! Loads outlive the turn without any state of their own: each is a `load_tools` call in the
//! event log, and a later turn replays the calls it finds in its history
//! ([`crate::ToolBox::restore_loads`]). Loaded definitions come after every other one, in load
//! order, so the definitions sent before a load stay a byte-identical prefix (provider prompt
//! caches keep working).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Mutex;

use serde::Deserialize;
use teamster_protocol::Event;
use teamster_protocol::event::ToolInfo;
use teamster_tools::{Tool, ToolAnnotations, ToolGate, ToolOutput};

/// The built-in tool that searches deferred tools.
pub const SEARCH_TOOLS: &str = "search_tools";
/// The built-in tool that loads deferred tools.
pub const LOAD_TOOLS: &str = "load_tools";
/// The most tools one search returns.
pub const MAX_SEARCH_RESULTS: usize = 20;
/// The most names one `load_tools` call may carry.
pub const MAX_LOAD_NAMES: usize = 32;
/// The most names listed when a search matches nothing.
const MAX_LISTED_NAMES: usize = 100;
/// The longest one-line description in search results, in characters.
const MAX_SUMMARY_CHARS: usize = 200;

/// The deferred tools of a toolbox and which of them are loaded.
///
/// Indexes refer to the toolbox's tool list, which only grows.
#[derive(Default)]
pub(crate) struct Deferred {
    /// Every deferred tool, in the order it was added.
    tools: Vec<usize>,
    /// The loaded ones, in load order.
    loaded: Mutex<Vec<usize>>,
    /// [`SEARCH_TOOLS`] and [`LOAD_TOOLS`], once there is a deferred tool.
    meta: Vec<Tool>,
}

impl Clone for Deferred {
    /// A snapshot: the clone's loads are its own.
    fn clone(&self) -> Deferred {
        Deferred { tools: self.tools.clone(), loaded: Mutex::new(self.loaded()), meta: self.meta.clone() }
    }
}

/// The arguments of [`SEARCH_TOOLS`].
#[derive(Deserialize)]
struct SearchArguments {
    #[serde(default)]
    query: Option<String>,
}

/// The arguments of [`LOAD_TOOLS`].
#[derive(Deserialize)]
struct LoadArguments {
    names: Vec<String>,
}

impl Deferred {
    /// Marks a tool (by its index) deferred.
    pub fn push(&mut self, index: usize) {
        if self.meta.is_empty() {
            self.meta = vec![search_tool(), load_tool()];
        }
        self.tools.push(index);
    }

    /// Whether the tool at `index` is deferred (loaded or not).
    pub fn contains(&self, index: usize) -> bool {
        self.tools.contains(&index)
    }

    /// Whether the tool at `index` may be called: not deferred, or loaded.
    pub fn is_available(&self, index: usize) -> bool {
        !self.contains(index) || self.lock().contains(&index)
    }

    /// The loaded tools' indexes, in load order.
    pub fn loaded(&self) -> Vec<usize> {
        self.lock().clone()
    }

    /// The built-in tools that stand in for the deferred ones (none when nothing is deferred).
    pub fn meta_tools(&self) -> &[Tool] {
        &self.meta
    }

    /// The built-in tool of that name, when there are deferred tools.
    pub fn meta_tool(&self, name: &str) -> Option<&Tool> {
        self.meta.iter().find(|tool| tool.name == name)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<usize>> {
        self.loaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs [`SEARCH_TOOLS`] or [`LOAD_TOOLS`]; `index_of` finds a tool's index by name.
    pub fn call(&self, name: &str, arguments: &str, tools: &[Tool], index_of: impl Fn(&str) -> Option<usize>) -> ToolOutput {
        let arguments = if arguments.trim().is_empty() { "{}" } else { arguments };
        if name == SEARCH_TOOLS {
            match serde_json::from_str::<SearchArguments>(arguments) {
                Ok(search) => self.search(search.query.as_deref().unwrap_or_default(), tools),
                Err(error) => ToolOutput::error(format!("The arguments must be {{\"query\": string}}: {error}.")),
            }
        } else {
            match serde_json::from_str::<LoadArguments>(arguments) {
                Ok(load) if load.names.len() > MAX_LOAD_NAMES => {
                    ToolOutput::error(format!("At most {MAX_LOAD_NAMES} tools can be loaded at once."))
                }
                Ok(load) => self.load(&load.names, tools, index_of),
                Err(error) => {
                    ToolOutput::error(format!("The arguments must be {{\"names\": [string, ...]}}: {error}."))
                }
            }
        }
    }

    /// Deferred tools matching the words of `query`, best first; all of them (up to the
    /// limit) for an empty query.
    fn search(&self, query: &str, tools: &[Tool]) -> ToolOutput {
        let words: Vec<String> =
            query.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()).map(str::to_lowercase).collect();
        let loaded = self.loaded();
        let mut matches: Vec<(u32, usize)> = self
            .tools
            .iter()
            .filter_map(|&index| {
                let score = if words.is_empty() { 1 } else { score(&tools[index], &words) };
                (score > 0).then_some((score, index))
            })
            .collect();
        // Stable: equal scores keep the order in which tools were added.
        matches.sort_by_key(|&(score, _)| std::cmp::Reverse(score));
        if matches.is_empty() {
            let mut text = format!("No tool matches {query:?}. The tools that can be loaded are: ");
            let names: Vec<&str> =
                self.tools.iter().take(MAX_LISTED_NAMES).map(|&index| tools[index].name.as_str()).collect();
            text.push_str(&names.join(", "));
            if self.tools.len() > MAX_LISTED_NAMES {
                let _ = write!(text, " and {} more", self.tools.len() - MAX_LISTED_NAMES);
            }
            text.push('.');
            return ToolOutput::ok(text);
        }
        let shown = matches.len().min(MAX_SEARCH_RESULTS);
        let mut text = format!(
            "{} tool(s) match{}. Call {LOAD_TOOLS} with the names you need, then call them.\n",
            matches.len(),
            if shown < matches.len() { format!("; the best {shown} are shown") } else { String::new() }
        );
        for &(_, index) in matches.iter().take(shown) {
            let tool = &tools[index];
            let state = if loaded.contains(&index) { " (loaded)" } else { "" };
            let _ = writeln!(text, "- {}{state}: {}", tool.name, summary(&tool.description));
        }
        ToolOutput::ok(text.trim_end().to_owned())
    }

    /// Loads deferred tools by name; names that are not deferred are reported, not loaded.
    fn load(&self, names: &[String], tools: &[Tool], index_of: impl Fn(&str) -> Option<usize>) -> ToolOutput {
        let mut newly = Vec::new();
        let mut already = Vec::new();
        let mut unknown = Vec::new();
        for name in names {
            match index_of(name) {
                Some(index) if self.contains(index) => {
                    if self.load_index(index) {
                        newly.push(tools[index].name.as_str());
                    } else {
                        already.push(name.as_str());
                    }
                }
                Some(_) => already.push(name.as_str()),
                None => unknown.push(name.as_str()),
            }
        }
        let mut text = String::new();
        if !newly.is_empty() {
            let _ = write!(text, "Loaded {}; they can be called from now on. ", newly.join(", "));
        }
        if !already.is_empty() {
            let _ = write!(text, "Already available: {}. ", already.join(", "));
        }
        if !unknown.is_empty() {
            let _ = write!(text, "No tool to load is named {}; use {SEARCH_TOOLS} to find names. ", unknown.join(", "));
        }
        if text.is_empty() {
            return ToolOutput::error("No tool names were given.");
        }
        let output = text.trim_end().to_owned();
        if newly.is_empty() && already.is_empty() { ToolOutput::error(output) } else { ToolOutput::ok(output) }
    }

    /// Loads one deferred tool; false when it already was.
    fn load_index(&self, index: usize) -> bool {
        let mut loaded = self.lock();
        if loaded.contains(&index) {
            return false;
        }
        loaded.push(index);
        true
    }

    /// Replays the `load_tools` calls of a thread's history that got a response, in order.
    /// Names that are not deferred any more are skipped.
    pub fn restore(&self, events: &[Event], thread_id: &str, index_of: impl Fn(&str) -> Option<usize>) {
        if self.tools.is_empty() {
            return;
        }
        let answered: HashSet<&str> = events
            .iter()
            .filter_map(|event| match event {
                Event::ToolResponse(response) if response.thread_id == thread_id => Some(response.tool_call_id.as_str()),
                _ => None,
            })
            .collect();
        for event in events {
            let Event::ModelMessage(message) = event else { continue };
            if message.thread_id != thread_id {
                continue;
            }
            for call in message.tool_calls.iter().flatten() {
                if call.function.name != LOAD_TOOLS || !answered.contains(call.id.as_str()) {
                    continue;
                }
                let Ok(load) = serde_json::from_str::<LoadArguments>(&call.function.arguments) else { continue };
                for name in load.names.iter().take(MAX_LOAD_NAMES) {
                    if let Some(index) = index_of(name).filter(|&index| self.contains(index)) {
                        self.load_index(index);
                    }
                }
            }
        }
    }
}

/// How well a tool matches the query words: a whole-name match counts most, then a word in
/// the name, then a word in the description.
fn score(tool: &Tool, words: &[String]) -> u32 {
    let name = tool.name.to_lowercase();
    let description = tool.description.to_lowercase();
    words
        .iter()
        .map(|word| {
            if name == *word {
                4
            } else if name.contains(word.as_str()) {
                2
            } else if description.contains(word.as_str()) {
                1
            } else {
                0
            }
        })
        .sum()
}

/// The first line of a description, cut to [`MAX_SUMMARY_CHARS`].
fn summary(description: &str) -> String {
    let line = description.lines().map(str::trim).find(|line| !line.is_empty()).unwrap_or("(no description)");
    match line.char_indices().nth(MAX_SUMMARY_CHARS) {
        Some((end, _)) => format!("{}...", &line[..end]),
        None => line.to_owned(),
    }
}

fn system_tool(name: &str, description: &str, input_schema: serde_json::Value) -> Tool {
    Tool {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema,
        info: ToolInfo::System { name: name.to_owned() },
        annotations: ToolAnnotations { read_only: true, destructive: false, idempotent: true },
        gate: ToolGate::None,
    }
}

fn search_tool() -> Tool {
    system_tool(
        SEARCH_TOOLS,
        "Searches the tools that are available but not loaded yet, by words of their names and \
         descriptions, and returns the matching names with a one-line description. Load the ones \
         you need with load_tools before calling them.",
        serde_json::json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words describing the tool you need; empty lists every tool."}
            },
            "required": ["query"]
        }),
    )
}

fn load_tool() -> Tool {
    system_tool(
        LOAD_TOOLS,
        "Loads tools by name (as search_tools returns them), so that they can be called from the \
         next step on.",
        serde_json::json!({
            "type": "object",
            "properties": {
                "names": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_LOAD_NAMES}
            },
            "required": ["names"]
        }),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use async_trait::async_trait;
    use teamster_tools::ToolSource;

    use super::*;
    use crate::ToolBox;

    /// Tools that answer with their own name and arguments.
    struct Named(Vec<(&'static str, &'static str)>);

    #[async_trait]
    impl ToolSource for Named {
        async fn list(&self) -> Result<Vec<Tool>, teamster_tools::Error> {
            Ok(self
                .0
                .iter()
                .map(|(name, description)| {
                    let mut tool = system_tool(name, description, serde_json::json!({"type": "object"}));
                    tool.annotations = ToolAnnotations::default();
                    tool
                })
                .collect())
        }

        async fn call(&self, name: &str, arguments: &str) -> ToolOutput {
            ToolOutput::ok(format!("{name} {arguments}"))
        }
    }

    /// A toolbox with `now` up front and three deferred tools.
    async fn sample() -> ToolBox {
        let mut toolbox = ToolBox::default();
        toolbox.add(Arc::new(Named(vec![("now", "Tells the time.")]))).await;
        let deferred = Named(vec![
            ("echo", "Returns the text it is given.\nSecond line."),
            ("add", "Adds two integers."),
            ("write_note", "Stores a note; echo is not this."),
        ]);
        toolbox.add_deferred(Arc::new(deferred), |tool| tool.name != "add").await;
        toolbox
    }

    fn names(toolbox: &ToolBox) -> Vec<String> {
        toolbox.definitions().into_iter().map(|definition| definition.name).collect()
    }

    #[tokio::test]
    async fn without_deferred_tools_there_are_no_stand_ins() {
        let mut toolbox = ToolBox::default();
        toolbox.add(Arc::new(Named(vec![("now", "")]))).await;
        assert_eq!(names(&toolbox), ["now"]);
        assert!(toolbox.get(SEARCH_TOOLS).is_none());
        assert!(toolbox.call(LOAD_TOOLS, r#"{"names":["now"]}"#).await.is_error);
    }

    #[tokio::test]
    async fn search_finds_and_load_appends_in_load_order() {
        let toolbox = sample().await;
        let before = toolbox.definitions();
        assert_eq!(names(&toolbox), ["now", "add", SEARCH_TOOLS, LOAD_TOOLS]);
        assert!(toolbox.get("echo").is_none());
        let refused = toolbox.call("echo", r#"{"text":"hi"}"#).await;
        assert!(refused.is_error && refused.content.contains("load_tools"), "{refused:?}");

        let found = toolbox.call(SEARCH_TOOLS, r#"{"query":"echo text"}"#).await;
        assert_eq!(
            found,
            ToolOutput::ok(
                "2 tool(s) match. Call load_tools with the names you need, then call them.\n\
                 - echo: Returns the text it is given.\n\
                 - write_note: Stores a note; echo is not this."
            )
        );
        let nothing = toolbox.call(SEARCH_TOOLS, r#"{"query":"weather"}"#).await;
        assert_eq!(nothing.content, "No tool matches \"weather\". The tools that can be loaded are: echo, write_note.");

        let loaded = toolbox.call(LOAD_TOOLS, r#"{"names":["write_note","echo","add","nope"]}"#).await;
        assert_eq!(
            loaded,
            ToolOutput::ok(
                "Loaded write_note, echo; they can be called from now on. Already available: add. \
                 No tool to load is named nope; use search_tools to find names."
            )
        );
        let after = toolbox.definitions();
        assert_eq!(names(&toolbox), ["now", "add", SEARCH_TOOLS, LOAD_TOOLS, "write_note", "echo"]);
        assert_eq!(after[..before.len()], before[..], "earlier definitions stay a prefix");
        assert_eq!(toolbox.call("echo", r#"{"text":"hi"}"#).await, ToolOutput::ok(r#"echo {"text":"hi"}"#));
        let listed = toolbox.call(SEARCH_TOOLS, r#"{"query":""}"#).await;
        assert!(listed.content.contains("- echo (loaded): Returns the text it is given.\n"), "{listed:?}");
    }

    #[tokio::test]
    async fn bad_load_arguments_are_errors_for_the_model() {
        let toolbox = sample().await;
        for arguments in ["", r#"{"names":"echo"}"#, r#"{"names":["nope"]}"#, r#"{"names":[]}"#] {
            assert!(toolbox.call(LOAD_TOOLS, arguments).await.is_error, "{arguments}");
        }
        let many = serde_json::json!({"names": vec!["echo"; MAX_LOAD_NAMES + 1]}).to_string();
        assert!(toolbox.call(LOAD_TOOLS, &many).await.is_error);
        assert_eq!(names(&toolbox), ["now", "add", SEARCH_TOOLS, LOAD_TOOLS]);
    }

    fn load_call(id: &str, thread: &str, names: &[&str]) -> Event {
        serde_json::from_value(serde_json::json!({
            "type": "model.message", "id": format!("msg-{id}"), "thread_id": thread, "created_at": "t",
            "role": "assistant", "finish_reason": "tool_calls",
            "tool_calls": [{"id": id, "type": "function", "function": {"name": LOAD_TOOLS,
                "arguments": serde_json::json!({"names": names}).to_string()},
                "tool_info": {"type": "truefoundry-system", "name": LOAD_TOOLS}}]
        }))
        .unwrap()
    }

    fn response(id: &str, thread: &str) -> Event {
        serde_json::from_value(serde_json::json!({
            "type": "tool.response", "id": format!("evt-{id}"), "thread_id": thread, "created_at": "t",
            "tool_call_id": id, "content": "Loaded."
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_later_turn_restores_answered_loads_in_order() {
        let events = vec![
            load_call("c1", "main", &["write_note", "gone"]),
            response("c1", "main"),
            load_call("c2", "main", &["echo"]),
            // Never answered (the turn was cancelled): not applied.
            load_call("c3", "other", &["echo"]),
            response("c3", "other"),
            load_call("c4", "main", &["echo", "write_note"]),
            response("c4", "main"),
        ];
        let toolbox = sample().await;
        toolbox.restore_loads(&events, "main");
        assert_eq!(names(&toolbox), ["now", "add", SEARCH_TOOLS, LOAD_TOOLS, "write_note", "echo"]);

        let fresh = sample().await;
        fresh.restore_loads(&events[..4], "main");
        assert_eq!(names(&fresh), ["now", "add", SEARCH_TOOLS, LOAD_TOOLS, "write_note"]);
    }
}
