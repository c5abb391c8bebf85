//! The tools of one turn: every source's tools, indexed by the name the model calls.
//!
//! Some tools may be deferred (see [`crate::deferred`]): they stay out of the definitions until
//! the model loads them with `load_tools`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use teamster_llm::ToolDefinition;
use teamster_protocol::Event;
use teamster_protocol::control::Permission;
use teamster_tools::{CallContext, Tool, ToolGate, ToolOutput, ToolSource};

use crate::deferred::{Deferred, LOAD_TOOLS, SEARCH_TOOLS};

/// The tools offered to the model in one turn, and where each comes from.
#[derive(Clone, Default)]
pub struct ToolBox {
    /// Every tool, deferred ones included, in the order they were added.
    tools: Vec<Tool>,
    sources: Vec<Arc<dyn ToolSource>>,
    /// Tool name to (index in `tools`, index in `sources`).
    by_name: HashMap<String, (usize, usize)>,
    deferred: Deferred,
    /// Tools this toolbox does not offer (see [`ToolBox::restricted`]), by index.
    hidden: HashSet<usize>,
    /// Tools offered whose calls are refused (see [`ToolBox::governed`]), by index.
    refused: HashSet<usize>,
}

impl ToolBox {
    /// Lists every source. A source that fails to list is skipped with a warning; the turn
    /// goes on with the others.
    pub async fn collect(sources: Vec<Arc<dyn ToolSource>>) -> ToolBox {
        let mut toolbox = ToolBox::default();
        for source in sources {
            toolbox.add(source).await;
        }
        toolbox
    }

    /// Adds a source's tools after those already present; a name already taken keeps its
    /// first owner.
    pub async fn add(&mut self, source: Arc<dyn ToolSource>) {
        self.add_deferred(source, |_| false).await;
    }

    /// Adds a source's tools like [`ToolBox::add`]; those for which `deferred` is true are
    /// left out of the definitions (and cannot be called) until the model loads them with
    /// `load_tools`, which `search_tools` helps find.
    pub async fn add_deferred(&mut self, source: Arc<dyn ToolSource>, deferred: impl Fn(&Tool) -> bool) {
        match source.list().await {
            Ok(tools) => {
                let source_index = self.sources.len();
                self.sources.push(source);
                for tool in tools {
                    if self.by_name.contains_key(&tool.name) || [SEARCH_TOOLS, LOAD_TOOLS].contains(&tool.name.as_str()) {
                        tracing::warn!(tool = %tool.name, "duplicate tool name skipped");
                        continue;
                    }
                    let index = self.tools.len();
                    if deferred(&tool) {
                        self.deferred.push(index);
                    }
                    self.by_name.insert(tool.name.clone(), (index, source_index));
                    self.tools.push(tool);
                }
            }
            Err(error) => tracing::warn!(%error, "tool source skipped"),
        }
    }

    /// A copy offering only the tools `keep` accepts (the sources stay shared).
    pub fn restricted(&self, keep: impl Fn(&Tool) -> bool) -> ToolBox {
        let mut copy = self.clone();
        copy.hidden.extend(self.tools.iter().enumerate().filter(|(_, tool)| !keep(tool)).map(|(index, _)| index));
        copy
    }

    /// A copy whose tools' gates follow `permission` where it says something: `Allow` runs a
    /// tool's calls at once, `Ask` waits for the user's approval, `Deny` refuses every call
    /// with an error result for the model. Client-side tools stay client-side unless refused.
    pub fn governed(&self, permission: impl Fn(&Tool) -> Option<Permission>) -> ToolBox {
        let mut copy = self.clone();
        for (index, tool) in copy.tools.iter_mut().enumerate() {
            let Some(permission) = permission(tool) else { continue };
            match permission {
                Permission::Deny => {
                    copy.refused.insert(index);
                    tool.gate = ToolGate::None;
                }
                _ if tool.gate == ToolGate::ClientSide => {}
                Permission::Allow => tool.gate = ToolGate::None,
                Permission::Ask => tool.gate = ToolGate::Approval,
            }
        }
        copy
    }

    /// Every tool, deferred ones included.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// A tool the model may call now: not deferred or loaded, or one of the built-in
    /// `search_tools` and `load_tools`.
    pub fn get(&self, name: &str) -> Option<&Tool> {
        if let Some(meta) = self.deferred.meta_tool(name) {
            return Some(meta);
        }
        self.by_name
            .get(name)
            .filter(|(tool, _)| self.deferred.is_available(*tool) && !self.hidden.contains(tool))
            .map(|(tool, _)| &self.tools[*tool])
    }

    /// The definitions sent to the model: the tools that are not deferred, in the order they
    /// were added; then `search_tools` and `load_tools` when some tools are deferred; then the
    /// loaded tools, in load order. A load only ever appends, so the definitions sent before it
    /// stay a prefix of those sent after.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        let loaded = self.deferred.loaded();
        let active = self
            .tools
            .iter()
            .enumerate()
            .filter(|(index, _)| !self.deferred.contains(*index) && !self.hidden.contains(index))
            .map(|(_, tool)| tool);
        active
            .chain(self.deferred.meta_tools())
            .chain(loaded.iter().filter(|index| !self.hidden.contains(index)).map(|index| &self.tools[*index]))
            .map(|tool| ToolDefinition {
                name: tool.name.clone(),
                description: tool.description.clone(),
                parameters: tool.input_schema.clone(),
            })
            .collect()
    }

    /// Loads again the tools that the thread's earlier `load_tools` calls loaded, found in
    /// its history (content events, oldest first), so loads last across turns with no state
    /// besides the event log. Call it before the turn's first model call.
    pub fn restore_loads(&self, events: &[Event], thread_id: &str) {
        self.deferred.restore(events, thread_id, |name| self.by_name.get(name).map(|(tool, _)| *tool));
    }

    /// Calls a tool by name. Unknown tools, deferred tools not loaded yet and malformed
    /// arguments are error outputs for the model, not failures of the turn.
    pub async fn call(&self, name: &str, arguments: &str) -> ToolOutput {
        self.call_in(name, arguments, CallContext::NONE).await
    }

    /// Calls a tool like [`ToolBox::call`], sending the progress it reports to `progress`.
    pub async fn call_in(&self, name: &str, arguments: &str, context: CallContext<'_>) -> ToolOutput {
        if self.deferred.meta_tool(name).is_some() {
            return self.deferred.call(name, arguments, &self.tools, |name| self.by_name.get(name).map(|(tool, _)| *tool));
        }
        let Some((tool, source)) = self.by_name.get(name).filter(|(tool, _)| !self.hidden.contains(tool)) else {
            return ToolOutput::error(format!("There is no tool named {name:?}."));
        };
        if !self.deferred.is_available(*tool) {
            return ToolOutput::error(format!(
                "The tool {name:?} is not loaded yet: call {LOAD_TOOLS} with its name first."
            ));
        }
        if self.refused.contains(tool) {
            return ToolOutput::error(format!("The session's permissions deny the tool {name:?}: it did not run."));
        }
        if !arguments.trim().is_empty()
            && let Err(error) = serde_json::from_str::<serde_json::Value>(arguments) {
                return ToolOutput::error(format!("The arguments are not valid JSON: {error}."));
            }
        within_event_limit(self.sources[*source].call_in(name, arguments, context).await)
    }
}

/// The most characters a tool result may take as a JSON string in its `tool.response` event
/// (see `teamster_protocol::sse`), the note of a cut result included.
const MAX_RESULT_CHARS: usize = teamster_protocol::sse::MAX_STRING_CHARS;

/// A tool's output, cut (saying so) where its text would not fit in one event.
pub(crate) fn within_event_limit(mut output: ToolOutput) -> ToolOutput {
    use teamster_protocol::sse::{json_string_chars, json_string_prefix};
    if output.content.len() * 6 + 2 <= MAX_RESULT_CHARS || json_string_chars(&output.content) <= MAX_RESULT_CHARS {
        return output;
    }
    let total = output.content.chars().count();
    let kept = json_string_prefix(&output.content, MAX_RESULT_CHARS - 200);
    let note = format!("\n\n[The tool result was cut: only its first {} of {total} characters are kept.]", kept.chars().count());
    output.content = format!("{kept}{note}");
    output
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_too_long_for_an_event_are_cut_saying_so() {
        let short = ToolOutput { content: "ok".to_owned(), is_error: false };
        assert_eq!(within_event_limit(short.clone()).content, "ok");
        let long = within_event_limit(ToolOutput { content: "\n".repeat(MAX_RESULT_CHARS), is_error: true });
        assert!(long.is_error);
        assert!(teamster_protocol::sse::json_string_chars(&long.content) <= MAX_RESULT_CHARS);
        assert!(long.content.ends_with(&format!("of {MAX_RESULT_CHARS} characters are kept.]")), "{}", &long.content[long.content.len() - 100..]);
    }
}
