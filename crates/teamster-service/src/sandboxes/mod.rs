//! Sandboxes: whether this server runs them, and a session's sandbox for a turn — provisioned
//! when a turn of a sandbox-enabled agent is planned, announced once by `sandbox.created`, offered
//! to the model as the `exec` tool, and destroyed with its session.

use std::sync::Arc;

use async_trait::async_trait;
use teamster_engine::ResultFiles;
use teamster_protocol::agent::SandboxConfig;
use teamster_protocol::event::SandboxCreated;
use teamster_protocol::{AgentSpec, Event, ids, timestamp};
use teamster_sandbox::{SandboxOwner, SandboxProvider};
use teamster_workspace::{WorkspaceTools, Workspaces};
use teamster_tools::ToolSource;

use crate::error::{Result, ServiceError};
mod skill_mounts;

pub use skill_mounts::{MAX_SKILLS, SkillSources};
pub(crate) use skill_mounts::validate as validate_skills;

/// Whether this server runs sandboxes.
#[derive(Clone)]
pub enum Sandboxes {
    /// It does not, for this reason (said to whoever asks for one).
    Off { reason: String },
    /// It does, with this provider, mounting skills from these sources; commands may use the
    /// network when `network` is `Ok`, and otherwise not, for the reason it holds.
    On {
        /// The sessions' workspaces on the provider (`workspaces.provider()`).
        workspaces: Arc<Workspaces>,
        skills: Arc<SkillSources>,
        network: std::result::Result<(), String>,
    },
}

/// Why network sandboxes are refused until the operator allows them.
const NETWORK_OFF: &str = "network sandboxes are off on this server (the operator allows them with --allow-sandbox-network)";

impl Default for Sandboxes {
    fn default() -> Sandboxes {
        Sandboxes::Off { reason: "no sandbox provider is configured".to_owned() }
    }
}

/// A session's sandbox, ready for a turn.
pub(crate) struct TurnSandbox {
    pub provider: Arc<dyn SandboxProvider>,
    pub skills: Arc<SkillSources>,
    pub sandbox_id: String,
    /// The tools on it the agent chose: `exec` and the file tools (`teamster-workspace`).
    pub tools: Arc<dyn ToolSource>,
    /// `sandbox.created`, when planning this turn made the sandbox (its workspace is ready).
    pub created: Option<Event>,
}

/// Checks the sandbox tools a spec chooses (`config.sandbox.tools`): only the sandbox's, each
/// shown by a valid name, no two by the same.
pub(crate) fn validate_tools(spec: &AgentSpec) -> Result<()> {
    let chosen = spec.config.as_ref().and_then(|config| config.sandbox.as_ref()).and_then(|sandbox| sandbox.tools.as_ref());
    match chosen {
        Some(choices) => teamster_workspace::check_choices(choices).map_err(|message| ServiceError::invalid_param("config.sandbox.tools", message)),
        None => Ok(()),
    }
}

/// The sandbox a spec asks for, if it asks for one.
pub(crate) fn wanted(spec: &AgentSpec) -> Option<&SandboxConfig> {
    spec.config.as_ref().and_then(|config| config.sandbox.as_ref()).filter(|sandbox| sandbox.enabled)
}

/// Whether a spec's sandbox asks for the network.
fn wants_network(spec: &AgentSpec) -> bool {
    wanted(spec).is_some_and(|sandbox| sandbox.network == Some(true))
}

impl Sandboxes {
    /// Sandboxes run by `provider`, with skills from `skills`.
    pub fn on(provider: Arc<dyn SandboxProvider>, skills: SkillSources) -> Sandboxes {
        let workspaces = Arc::new(Workspaces::new(provider));
        Sandboxes::On { workspaces, skills: Arc::new(skills), network: Err(NETWORK_OFF.to_owned()) }
    }

    /// The same, with commands allowed the network (`Ok`) or refused it for a reason.
    pub fn with_network(self, allowed: std::result::Result<(), String>) -> Sandboxes {
        match self {
            Sandboxes::On { workspaces, skills, .. } => Sandboxes::On { workspaces, skills, network: allowed },
            off => off,
        }
    }

    /// Whether sandboxes run here.
    pub fn enabled(&self) -> bool {
        matches!(self, Sandboxes::On { .. })
    }

    /// Refuses (422) a spec that asks for a sandbox when this server runs none.
    pub(crate) fn check(&self, spec: &AgentSpec) -> Result<()> {
        match self {
            Sandboxes::Off { reason } if wanted(spec).is_some() => {
                Err(ServiceError::Unprocessable(format!("this server runs no sandboxes: {reason}")))
            }
            Sandboxes::On { network: Err(reason), .. } if wants_network(spec) => {
                Err(ServiceError::Unprocessable(format!("config.sandbox.network: {reason}")))
            }
            _ => Ok(()),
        }
    }

    /// The session's sandbox for a turn of `spec`, if the spec asks for one; its files count
    /// toward the disk quota of `owner` (the session's creator) and their tenant.
    pub(crate) async fn for_turn(
        &self,
        session_id: &str,
        owner: &SandboxOwner,
        spec: &AgentSpec,
    ) -> std::result::Result<Option<TurnSandbox>, String> {
        let Some(wanted) = wanted(spec) else { return Ok(None) };
        let provider = match self {
            // A spec saved before the operator turned network sandboxes off runs no command with one.
            Sandboxes::On { network: Err(reason), .. } if wants_network(spec) => {
                return Err(format!("The agent asks for a sandbox with network access, but {reason}."));
            }
            Sandboxes::On { workspaces, skills, .. } => (workspaces.provider().clone(), workspaces, skills.clone()),
            Sandboxes::Off { reason } => return Err(format!("The agent needs a sandbox, but this server runs none: {reason}.")),
        };
        let (provider, workspaces, skills) = provider;
        let provisioned = workspaces
            .provision(session_id, owner)
            .await
            .map_err(|error| format!("The session's sandbox could not be prepared: {error}."))?;
        let network = wanted.network.unwrap_or(false);
        let created = provisioned.created.then(|| {
            Event::SandboxCreated(SandboxCreated {
                id: ids::new_id("evt"),
                created_at: timestamp::now(),
                sandbox_id: provisioned.sandbox_id.clone(),
                thread_id: None,
            })
        });
        let tools = Arc::new(WorkspaceTools::new(provider.clone(), provisioned.sandbox_id.clone(), network, wanted.tools.as_ref()));
        Ok(Some(TurnSandbox { provider, skills, sandbox_id: provisioned.sandbox_id, tools, created }))
    }

    /// The lifecycle of the sessions' workspaces, when sandboxes run here.
    pub(crate) fn workspaces(&self) -> Option<&Arc<Workspaces>> {
        match self {
            Sandboxes::On { workspaces, .. } => Some(workspaces),
            Sandboxes::Off { .. } => None,
        }
    }

    /// Removes a deleted session's sandbox (logged, not failed, when it cannot be).
    pub(crate) async fn destroy(&self, session_id: &str) {
        if let Sandboxes::On { workspaces, .. } = self
            && let Err(error) = workspaces.remove(session_id).await
        {
            tracing::warn!(session_id, %error, "a deleted session's sandbox could not be removed");
        }
    }
}

/// The directory of the sandbox where large tool results are kept whole.
pub const TOOL_RESULTS_DIR: &str = "/workspace/.tool-results";

/// Large tool results kept as files of a session's sandbox.
struct ResultsInSandbox {
    provider: Arc<dyn SandboxProvider>,
    sandbox_id: String,
}

#[async_trait]
impl ResultFiles for ResultsInSandbox {
    fn path(&self, tool_call_id: &str) -> String {
        let name: String = tool_call_id
            .chars()
            .take(128)
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
            .collect();
        format!("{TOOL_RESULTS_DIR}/{name}.txt")
    }

    async fn keep(&self, tool_call_id: &str, content: &str) -> std::result::Result<(), String> {
        let path = self.path(tool_call_id);
        self.provider.write_file(&self.sandbox_id, &path, content.as_bytes()).await.map_err(|error| error.to_string())
    }
}

impl TurnSandbox {
    /// Where the turn keeps its large tool results: files of this sandbox.
    pub(crate) fn result_files(&self) -> Arc<dyn ResultFiles> {
        Arc::new(ResultsInSandbox { provider: self.provider.clone(), sandbox_id: self.sandbox_id.clone() })
    }
}

#[cfg(test)]
mod tests {
    use teamster_protocol::ToolInfo;
    use teamster_protocol::control::ToolCategory;

    /// The permission policy knows the file tools by name (`teamster-control` knows no sandbox):
    /// the two lists must agree.
    #[test]
    fn the_file_tools_fall_in_the_read_and_edit_categories() {
        let spec = teamster_protocol::AgentSpec::default();
        for tool in teamster_workspace::FileTools::definitions() {
            let expected = match teamster_workspace::READ_TOOLS.contains(&tool.name.as_str()) {
                true => ToolCategory::Read,
                false => ToolCategory::Edit,
            };
            assert!(matches!(&tool.info, ToolInfo::System { name } if *name == tool.name));
            assert_eq!(teamster_control::category_of(&spec, &tool.name, &tool.info, false), expected, "{}", tool.name);
        }
        let edits = teamster_workspace::FileTools::definitions().into_iter().filter(|tool| teamster_workspace::EDIT_TOOLS.contains(&tool.name.as_str())).count();
        assert_eq!(edits, teamster_workspace::EDIT_TOOLS.len());
    }
}
