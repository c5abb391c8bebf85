//! [`WorkspaceTools`]: the sandbox's tools as one agent offers them (`config.sandbox.tools`):
//! `exec` and the file tools, each by its own name or another, or left out. A renamed tool
//! keeps its own name in its `tool_info` (`{"type": "system", "name": "read_file"}`), which is
//! what the permission policy's categories go by.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use teamster_protocol::agent::SandboxToolChoice;
use teamster_sandbox::{EXEC_TOOL, ExecTool, SandboxProvider};
use teamster_tools::{Tool, ToolOutput, ToolSource};

use crate::{FILE_TOOLS, FileTools};

/// The longest name a tool may be shown by.
const MAX_NAME: usize = 64;

/// Every tool of the sandbox, by its own name.
pub fn sandbox_tool_names() -> impl Iterator<Item = &'static str> {
    std::iter::once(EXEC_TOOL).chain(FILE_TOOLS)
}

/// Every tool of the sandbox as the model sees it, before any choice.
pub fn sandbox_tool_definitions() -> Vec<Tool> {
    std::iter::once(ExecTool::definition()).chain(FileTools::definitions()).collect()
}

/// Checks `config.sandbox.tools`: only the sandbox's tools, each shown by a name a model
/// accepts (letters, digits, `_` and `-`, 1 to 64 of them), no two by the same name. The error
/// says what is wrong, for the one who wrote the spec.
pub fn check_choices(choices: &BTreeMap<String, SandboxToolChoice>) -> Result<(), String> {
    let mut shown = std::collections::BTreeSet::new();
    for (name, choice) in choices {
        if !sandbox_tool_names().any(|known| known == name) {
            let known: Vec<&str> = sandbox_tool_names().collect();
            return Err(format!("config.sandbox.tools names {name:?}, which is not a sandbox tool; they are: {}", known.join(", ")));
        }
        let as_shown = match choice {
            SandboxToolChoice::Offered(false) => continue,
            SandboxToolChoice::Offered(true) => name.as_str(),
            SandboxToolChoice::Renamed(renamed) => renamed.as_str(),
        };
        let valid = !as_shown.is_empty()
            && as_shown.len() <= MAX_NAME
            && as_shown.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(format!("config.sandbox.tools shows {name:?} as {as_shown:?}: a tool's name has 1 to {MAX_NAME} letters, digits, `_` or `-`"));
        }
        if !shown.insert(as_shown) {
            return Err(format!("config.sandbox.tools shows two tools as {as_shown:?}"));
        }
    }
    Ok(())
}

/// The name each sandbox tool is shown by, those left out absent.
pub fn shown_names(choices: Option<&BTreeMap<String, SandboxToolChoice>>) -> BTreeMap<&'static str, String> {
    sandbox_tool_names()
        .filter_map(|name| match choices.map(|choices| choices.get(name)) {
            None => Some((name, name.to_owned())),
            Some(None | Some(SandboxToolChoice::Offered(false))) => None,
            Some(Some(SandboxToolChoice::Offered(true))) => Some((name, name.to_owned())),
            Some(Some(SandboxToolChoice::Renamed(renamed))) => Some((name, renamed.clone())),
        })
        .collect()
}

/// The sandbox's tools on one session's sandbox, as the agent chose them.
pub struct WorkspaceTools {
    exec: ExecTool,
    files: FileTools,
    /// Each offered tool's own name, by the name it is shown by.
    offered: BTreeMap<String, &'static str>,
}

impl WorkspaceTools {
    /// The tools on the provisioned sandbox `sandbox_id`; `network` when the agent allows its
    /// commands the network; `choices` from `config.sandbox.tools` (checked when saved).
    pub fn new(
        provider: Arc<dyn SandboxProvider>,
        sandbox_id: String,
        network: bool,
        choices: Option<&BTreeMap<String, SandboxToolChoice>>,
    ) -> WorkspaceTools {
        let offered = shown_names(choices).into_iter().map(|(own, shown)| (shown, own)).collect();
        WorkspaceTools { exec: ExecTool::new(provider.clone(), sandbox_id.clone(), network), files: FileTools::new(provider, sandbox_id), offered }
    }
}

/// `tools` as `choices` show them: those left out gone, the others renamed.
pub fn as_chosen(tools: Vec<Tool>, choices: Option<&BTreeMap<String, SandboxToolChoice>>) -> Vec<Tool> {
    let shown = shown_names(choices);
    tools
        .into_iter()
        .filter_map(|mut tool| {
            let name = shown.get(tool.name.as_str())?;
            tool.name.clone_from(name);
            Some(tool)
        })
        .collect()
}

#[async_trait]
impl ToolSource for WorkspaceTools {
    async fn list(&self) -> Result<Vec<Tool>, teamster_tools::Error> {
        let mut tools = sandbox_tool_definitions();
        tools.retain(|tool| self.offered.values().any(|own| *own == tool.name));
        for tool in &mut tools {
            if let Some((shown, _)) = self.offered.iter().find(|(_, own)| **own == tool.name) {
                tool.name.clone_from(shown);
            }
        }
        Ok(tools)
    }

    async fn call(&self, name: &str, arguments: &str) -> ToolOutput {
        self.call_in(name, arguments, teamster_tools::CallContext::NONE).await
    }

    /// `exec`'s output goes to `progress` while the command runs.
    async fn call_in(&self, name: &str, arguments: &str, context: teamster_tools::CallContext<'_>) -> ToolOutput {
        match self.offered.get(name).copied() {
            Some(EXEC_TOOL) => self.exec.call_in(EXEC_TOOL, arguments, context).await,
            Some(own) => self.files.call(own, arguments).await,
            None => ToolOutput::error(format!("unknown tool {name:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choices(value: serde_json::Value) -> BTreeMap<String, SandboxToolChoice> {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn choices_select_rename_and_are_checked() {
        let all = shown_names(None);
        assert_eq!(all.len(), 7);
        let chosen = choices(serde_json::json!({"read_file": "Read", "exec": true, "grep": false}));
        check_choices(&chosen).unwrap();
        let shown = shown_names(Some(&chosen));
        assert_eq!(shown.into_iter().collect::<Vec<_>>(), [("exec", "exec".to_owned()), ("read_file", "Read".to_owned())]);
        let renamed = as_chosen(sandbox_tool_definitions(), Some(&chosen));
        assert_eq!(renamed.iter().map(|tool| tool.name.as_str()).collect::<Vec<_>>(), ["exec", "Read"]);
        assert!(matches!(&renamed[1].info, teamster_protocol::ToolInfo::System { name } if name == "read_file"));

        assert!(check_choices(&choices(serde_json::json!({"rm": true}))).unwrap_err().contains("not a sandbox tool"));
        assert!(check_choices(&choices(serde_json::json!({"read_file": "has space"}))).is_err());
        assert!(check_choices(&choices(serde_json::json!({"read_file": "x", "grep": "x"}))).unwrap_err().contains("two tools"));
    }
}
