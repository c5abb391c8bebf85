//! The runtime's own settings and errors: what a program embedding it sets and handles, in
//! plain types, turned into the service's at [`Runtime::open_with`](super::Runtime::open_with)
//! and out of its errors at each call.

use std::time::Duration;

#[cfg(feature = "sandbox")]
use std::path::PathBuf;
#[cfg(feature = "sandbox")]
use std::sync::Arc;

use teamster_service::{ServiceConfig, ServiceError, ToolSets};

/// How a [`Runtime`](super::Runtime) runs. `RuntimeOptions::default()` is what
/// [`Runtime::open`](super::Runtime::open) uses.
#[derive(Clone)]
#[non_exhaustive]
pub struct RuntimeOptions {
    /// The longest a turn may run before it is cancelled (10 minutes by default).
    pub turn_timeout: Duration,
    /// Whether MCP servers of type stdio (commands run on this machine) may be added. Off by
    /// default.
    pub allow_stdio_mcp: bool,
    /// Sandboxes for agents that ask for one (`config.sandbox.enabled`); none by default.
    #[cfg(feature = "sandbox")]
    pub sandbox: Option<SandboxOptions>,
    /// The program's in-process tools, by name ([`NativeTools::register`](super::NativeTools::register)).
    pub(super) tool_sets: ToolSets,
}

impl Default for RuntimeOptions {
    fn default() -> RuntimeOptions {
        RuntimeOptions {
            turn_timeout: Duration::from_secs(600),
            allow_stdio_mcp: false,
            #[cfg(feature = "sandbox")]
            sandbox: None,
            tool_sets: ToolSets::default(),
        }
    }
}

impl std::fmt::Debug for RuntimeOptions {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = formatter.debug_struct("RuntimeOptions");
        debug.field("turn_timeout", &self.turn_timeout).field("allow_stdio_mcp", &self.allow_stdio_mcp);
        #[cfg(feature = "sandbox")]
        debug.field("sandbox", &self.sandbox.is_some());
        debug.finish_non_exhaustive()
    }
}

/// Sandboxes for agents: who runs them, and the skills they may mount.
#[cfg(feature = "sandbox")]
#[derive(Clone)]
pub struct SandboxOptions {
    /// Runs the sandboxes ([`Bubblewrap`](super::Bubblewrap) on this machine).
    pub provider: Arc<dyn super::SandboxProvider>,
    /// Where skills fetched from git are kept between turns.
    pub skill_cache: PathBuf,
    /// Skills from local directories, by the name agents give them (`skills: [{name}]`).
    pub local_skills: Vec<(String, PathBuf)>,
}

#[cfg(feature = "sandbox")]
impl SandboxOptions {
    /// Sandboxes run by `provider`, with the skill cache in `skill_cache` and no local skills.
    pub fn new(provider: Arc<dyn super::SandboxProvider>, skill_cache: impl Into<PathBuf>) -> SandboxOptions {
        SandboxOptions { provider, skill_cache: skill_cache.into(), local_skills: Vec::new() }
    }

    /// Adds a skill from a local directory (one with a `SKILL.md`).
    pub fn with_local_skill(mut self, name: impl Into<String>, dir: impl Into<PathBuf>) -> SandboxOptions {
        self.local_skills.push((name.into(), dir.into()));
        self
    }
}

impl RuntimeOptions {
    /// The service's configuration for these options.
    pub(super) fn into_service_config(self) -> ServiceConfig {
        #[cfg(feature = "sandbox")]
        let sandboxes = match self.sandbox {
            Some(sandbox) => {
                let cache = teamster_service::SkillCache::new(sandbox.skill_cache);
                let skills = sandbox
                    .local_skills
                    .into_iter()
                    .fold(teamster_service::SkillSources::new(cache), |skills, (name, dir)| skills.with_local(name, dir));
                teamster_service::Sandboxes::on(sandbox.provider, skills)
            }
            None => teamster_service::Sandboxes::default(),
        };
        #[cfg(not(feature = "sandbox"))]
        let sandboxes = teamster_service::Sandboxes::default();
        ServiceConfig {
            turn_timeout: self.turn_timeout,
            allow_stdio_mcp: self.allow_stdio_mcp,
            sandboxes,
            tool_sets: self.tool_sets,
            ..ServiceConfig::default()
        }
    }
}

/// Why the runtime refused a request, as the server's status codes say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The request is malformed or breaks a rule.
    Invalid,
    /// The runtime's user may not do this.
    Forbidden,
    /// What the request names does not exist.
    NotFound,
    /// Part of the request is larger than the runtime accepts.
    TooLarge,
    /// It conflicts with the current state: a name is taken, or a turn is running.
    Conflict,
    /// What it names cannot serve this any more (an expired stream, a deleted agent).
    PreconditionFailed,
    /// What it names existed and was removed.
    Gone,
    /// A bounded queue or quota is full.
    TooMany,
    /// It needs something the runtime does not provide (a model that no provider serves).
    Unprocessable,
    /// A user must first authorize the runtime with another service (an MCP server's OAuth).
    AuthorizationRequired,
}

/// Why a runtime call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The store the database URL names could not be opened, or this build has no backend
    /// for it (the `sqlite` and `postgres` features).
    #[error(transparent)]
    Store(#[from] teamster_stores::OpenError),
    /// The runtime refused the request.
    #[error("{message}")]
    Refused {
        /// Why, as a kind.
        refusal: Refusal,
        /// What to change, in words.
        message: String,
    },
    /// The runtime could not do it: its store, or a server it depends on (an MCP server, an
    /// authorization server), failed. The message says which; a store's details are logged.
    #[error("{0}")]
    Failed(String),
    /// A model provider cannot be added: its definition is not valid, or the environment
    /// holds no key for one ([`Error::MissingApiKey`](crate::Error::MissingApiKey)).
    #[error(transparent)]
    Model(#[from] crate::Error),
    /// The sandbox provider could not start (no `bwrap`, no user namespaces).
    #[cfg(feature = "sandbox")]
    #[error(transparent)]
    Sandbox(#[from] teamster_sandbox::SandboxError),
    /// A stored event could not be read back.
    #[error("reading an event: {0}")]
    Event(String),
}

impl RuntimeError {
    /// Why the runtime refused the request; `None` when it failed instead.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            RuntimeError::Refused { refusal, .. } => Some(*refusal),
            _ => None,
        }
    }
}

impl From<ServiceError> for RuntimeError {
    fn from(error: ServiceError) -> RuntimeError {
        let refusal = match &error {
            ServiceError::Invalid { .. } => Refusal::Invalid,
            ServiceError::Forbidden(_) => Refusal::Forbidden,
            ServiceError::NotFound(_) => Refusal::NotFound,
            ServiceError::TooLarge(_) => Refusal::TooLarge,
            ServiceError::Conflict { .. } => Refusal::Conflict,
            ServiceError::PreconditionFailed(_) => Refusal::PreconditionFailed,
            ServiceError::Gone(_) => Refusal::Gone,
            ServiceError::TooMany(_) => Refusal::TooMany,
            ServiceError::Unprocessable(_) => Refusal::Unprocessable,
            ServiceError::AuthRequired(_) => Refusal::AuthorizationRequired,
            ServiceError::FailedDependency(_)
            | ServiceError::Upstream(_)
            | ServiceError::Unavailable(_)
            | ServiceError::Store(_) => {
                if let ServiceError::Store(store) = &error {
                    tracing::warn!(error = %store, "the runtime's store failed");
                }
                return RuntimeError::Failed(error.to_string());
            }
        };
        RuntimeError::Refused { refusal, message: error.to_string() }
    }
}
