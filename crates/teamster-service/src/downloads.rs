//! Files downloaded from a session by its creator alone: the files its turns' input stored
//! (named by digest, `input_files.rs`), and files of its sandbox, when its agent allows
//! downloads (`config.sandbox.file_downloads`, on by default).
//!
//! A sandbox is addressed by its id (the gateway dialect, from `sandbox.created`) or by a turn
//! of its session (the native API). The store keeps both links when a sandbox is made, so every
//! replica finds the session of a sandbox and the sandbox of a session. Only the session's
//! creator learns that its sandbox was removed (410: the idle sweep took it, or the session was
//! deleted; the link names the creator, so this holds once the session is gone); to anyone
//! else a sandbox that is not theirs is answered exactly as one that never was (404), so no one
//! learns another's ids.

use teamster_protocol::AgentSpec;
use teamster_sandbox::{OpenedFile, SandboxError};
use teamster_store::SettingsStore;

use crate::error::{Result, ServiceError};
use crate::input_files::short;
use crate::sandboxes::{self, Sandboxes};
use crate::{Caller, Service};

/// Settings kinds of the links: sandbox id → session id, and session id → sandbox id.
const SANDBOX_SESSION: &str = "sandbox-session";
const SESSION_SANDBOX: &str = "session-sandbox";
/// The longest path accepted.
const MAX_PATH_CHARS: usize = 4096;

/// The sandbox a download reads from.
#[derive(Clone, Copy, Debug)]
pub enum SandboxAddress<'a> {
    /// By the id `sandbox.created` announced.
    Sandbox(&'a str),
    /// By a turn of its session.
    Turn { session_id: &'a str, turn_id: &'a str },
}

/// A downloaded file.
#[derive(Debug)]
pub struct SandboxFile {
    /// The file's name: the last component of its path.
    pub name: String,
    /// Its length, and its bytes to stream.
    pub file: OpenedFile,
}

/// A sandbox's link to its session, and the session's creator (who keeps learning of the
/// sandbox once the session is deleted). Links written before the creator was kept are the
/// session id alone.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct SandboxLink {
    session_id: String,
    #[serde(default)]
    owner: Option<String>,
}

impl SandboxLink {
    fn read(value: String) -> SandboxLink {
        serde_json::from_str(&value).unwrap_or(SandboxLink { session_id: value, owner: None })
    }
}

/// Records both links of a session's new sandbox, the first with the session's creator.
pub(crate) async fn link(store: &dyn SettingsStore, session_id: &str, owner: &str, sandbox_id: &str) -> Result<()> {
    let now = teamster_protocol::timestamp::now();
    let link = SandboxLink { session_id: session_id.to_owned(), owner: Some(owner.to_owned()) };
    let value = serde_json::to_string(&link).map_err(|error| ServiceError::invalid(error.to_string()))?;
    store.put_setting(SANDBOX_SESSION, sandbox_id, &value, &now).await?;
    store.put_setting(SESSION_SANDBOX, session_id, sandbox_id, &now).await?;
    Ok(())
}

/// A stored file of a session, for download.
#[derive(Clone, Debug)]
pub struct DownloadedFile {
    pub media_type: String,
    pub data: Vec<u8>,
}

/// A session's files, for download by its creator: those stored with its turns' input, and
/// those of its sandbox ([`Service::downloads`]).
pub struct Downloads<'a> {
    pub(crate) service: &'a Service,
}

impl Downloads<'_> {
    /// A file of the caller's session by the SHA-256 digest its `teamster-file:` reference
    /// names. 404 for another caller's session, an unknown session or an unknown digest.
    pub async fn session_file(&self, caller: &Caller, session_id: &str, digest: &str) -> Result<DownloadedFile> {
        self.service.catalog().owned_session(caller, session_id).await?;
        let well_formed = digest.len() == 64 && digest.bytes().all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte));
        if !well_formed {
            return Err(ServiceError::invalid_param("digest", "a file is named by the SHA-256 digest of its reference: 64 lowercase hex digits"));
        }
        match self.service.stores().sessions.get_file(session_id, digest).await {
            Ok(file) => Ok(DownloadedFile { media_type: file.media_type, data: file.data }),
            Err(teamster_store::Error::NotFound(_)) => Err(ServiceError::NotFound(format!("this session has no file {digest:?}"))),
            Err(other) => Err(other.into()),
        }
    }

    /// A file of a sandbox, at an absolute `path` inside it (`/workspace/...` or `/tmp/...`).
    ///
    /// 400 for a malformed or escaping path, 403 for another caller's session or an agent that
    /// forbids downloads, 404 for an unknown session, turn, sandbox or file (and for a sandbox of
    /// a session the caller does not own), 410 for the owner's sandbox the idle sweep removed or
    /// its session's deletion destroyed, 412 when the session has no sandbox or the server
    /// runs none, 413 for a file over the transfer limit, 502 when the provider fails.
    pub async fn sandbox_file(&self, caller: &Caller, address: SandboxAddress<'_>, path: &str) -> Result<SandboxFile> {
        check_path(path)?;
        let Sandboxes::On { workspaces, .. } = self.service.sandboxes() else {
            return Err(ServiceError::PreconditionFailed("this server runs no sandboxes".to_owned()));
        };
        let (session, sandbox_id) = match address {
            SandboxAddress::Sandbox(sandbox_id) => {
                let unknown = || ServiceError::NotFound(format!("sandbox {:?} not found", short(sandbox_id)));
                let Some(link) = self.service.stores().settings.get_setting(SANDBOX_SESSION, sandbox_id).await? else {
                    return Err(unknown());
                };
                let link = SandboxLink::read(link);
                // Another caller's session: as if the sandbox never was. A deleted one took its
                // sandbox with it, which only its creator learns.
                let session = self.service.catalog().owned_session(caller, &link.session_id).await.map_err(|error| match error {
                    ServiceError::NotFound(_) if link.owner.as_deref() == Some(caller.subject.subject_id.as_str()) => {
                        ServiceError::Gone(format!("sandbox {:?} was removed with its session", short(sandbox_id)))
                    }
                    ServiceError::NotFound(_) | ServiceError::Forbidden(_) => unknown(),
                    other => other,
                })?;
                (session, sandbox_id.to_owned())
            }
            SandboxAddress::Turn { session_id, turn_id } => {
                let session = self.service.catalog().owned_session(caller, session_id).await?;
                self.service.turn_record(session_id, turn_id).await?;
                let sandbox_id = self.service.stores().settings.get_setting(SESSION_SANDBOX, session_id).await?.ok_or_else(|| {
                    ServiceError::PreconditionFailed("this session has no sandbox: no turn of it has used one".to_owned())
                })?;
                (session, sandbox_id)
            }
        };
        check_downloads_allowed(&self.service.catalog().session_spec(&session).await?)?;
        let file = workspaces.provider().open_file(&sandbox_id, path).await.map_err(|error| match error {
            SandboxError::NotFound(_) => ServiceError::Gone(format!("sandbox {sandbox_id:?} was removed (idle, or with its session)")),
            SandboxError::InvalidPath { .. } | SandboxError::InvalidRequest(_) => ServiceError::invalid_param("path", error.to_string()),
            SandboxError::NoSuchFile(_) => ServiceError::NotFound(error.to_string()),
            SandboxError::TooLarge { .. } => ServiceError::TooLarge(error.to_string()),
            other => {
                tracing::warn!(sandbox_id, error = %other, "a sandbox file could not be read");
                ServiceError::Upstream("the sandbox could not be read".to_owned())
            }
        })?;
        let name = path.rsplit('/').next().unwrap_or_default().to_owned();
        Ok(SandboxFile { name, file })
    }
}

/// A download path: absolute, bounded, without NUL; the provider checks it stays inside.
fn check_path(path: &str) -> Result<()> {
    let problem = if !path.starts_with('/') {
        "the path must be absolute, such as /workspace/out.csv"
    } else if path.chars().count() > MAX_PATH_CHARS {
        "the path is too long"
    } else if path.contains('\0') {
        "the path contains a NUL character"
    } else if path.ends_with('/') {
        "the path names a directory; name a file"
    } else {
        return Ok(());
    };
    Err(ServiceError::invalid_param("path", problem))
}

/// 412 for an agent without a sandbox, 403 for one that forbids downloads.
fn check_downloads_allowed(spec: &AgentSpec) -> Result<()> {
    match sandboxes::wanted(spec) {
        None => Err(ServiceError::PreconditionFailed("this session's agent has no sandbox".to_owned())),
        Some(sandbox) if sandbox.file_downloads == Some(false) => {
            Err(ServiceError::Forbidden("this session's agent does not allow file downloads (config.sandbox.file_downloads)".to_owned()))
        }
        Some(_) => Ok(()),
    }
}
