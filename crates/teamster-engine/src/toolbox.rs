//! The tools of one turn: every source's tools, indexed by the name the model calls.

use std::collections::HashMap;
use std::sync::Arc;

use teamster_llm::ToolDefinition;
use teamster_tools::{Tool, ToolOutput, ToolSource};

/// The tools offered to the model in one turn, and where each comes from.
#[derive(Clone, Default)]
pub struct ToolBox {
    tools: Vec<Tool>,
    sources: Vec<Arc<dyn ToolSource>>,
    /// Tool name to (index in `tools`, index in `sources`).
    by_name: HashMap<String, (usize, usize)>,
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
        match source.list().await {
            Ok(tools) => {
                let source_index = self.sources.len();
                self.sources.push(source);
                for tool in tools {
                    if self.by_name.contains_key(&tool.name) {
                        tracing::warn!(tool = %tool.name, "duplicate tool name skipped");
                        continue;
                    }
                    self.by_name.insert(tool.name.clone(), (self.tools.len(), source_index));
                    self.tools.push(tool);
                }
            }
            Err(error) => tracing::warn!(%error, "tool source skipped"),
        }
    }

    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.by_name.get(name).map(|(tool, _)| &self.tools[*tool])
    }

    /// The definitions sent to the model.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools
            .iter()
            .map(|tool| ToolDefinition {
                name: tool.name.clone(),
                description: tool.description.clone(),
                parameters: tool.input_schema.clone(),
            })
            .collect()
    }

    /// Calls a tool by name. Unknown tools and malformed arguments are error outputs for the
    /// model, not failures of the turn.
    pub async fn call(&self, name: &str, arguments: &str) -> ToolOutput {
        let Some((_, source)) = self.by_name.get(name) else {
            return ToolOutput::error(format!("There is no tool named {name:?}."));
        };
        if !arguments.trim().is_empty()
            && let Err(error) = serde_json::from_str::<serde_json::Value>(arguments) {
                return ToolOutput::error(format!("The arguments are not valid JSON: {error}."));
            }
        self.sources[*source].call(name, arguments).await
    }
}
