//! Who a sandbox belongs to, and the disk quota of everything one subject or one tenant holds.
//!
//! A sandbox is bounded on its own ([`crate::Limits::max_workspace_bytes`]), but a subject with
//! many sessions would hold that much in each of them. So each sandbox records its owner (the
//! session's creator and their tenant) in its directory, and the provider's ledger (`quota.rs`)
//! keeps running totals of the last measurements of every sandbox it knows, per subject and per
//! tenant. A
//! command starts over the quota, a running command is killed, and a write is refused, when the
//! sandbox's owner is over its subject's or its tenant's bound, as for the sandbox's own.
//!
//! The totals are what this process measured: at start, and at every sweep of idle sandboxes,
//! the provider learns the sandboxes under its root it did not make (after a restart, or made by
//! another replica sharing the root) and measures them in the background.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::SandboxError;

/// The file in a sandbox's directory (outside its workspace and `/tmp`) naming its owner.
pub(crate) const OWNER_FILE: &str = "owner.json";
/// The longest tenant or subject id an owner may have.
const MAX_ID_BYTES: usize = 512;

/// Whose a sandbox is: the subject that created its session, and the subject's tenant.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SandboxOwner {
    pub tenant: String,
    pub subject: String,
}

impl SandboxOwner {
    pub fn new(tenant: impl Into<String>, subject: impl Into<String>) -> SandboxOwner {
        SandboxOwner { tenant: tenant.into(), subject: subject.into() }
    }

    /// Refuses empty and overlong ids.
    pub(crate) fn check(&self) -> Result<(), SandboxError> {
        for (what, id) in [("tenant", &self.tenant), ("subject", &self.subject)] {
            if id.is_empty() || id.len() > MAX_ID_BYTES {
                return Err(SandboxError::InvalidRequest(format!("a sandbox's {what} must be 1 to {MAX_ID_BYTES} bytes")));
            }
        }
        Ok(())
    }

    /// The owner recorded in a sandbox's directory, if it holds a readable record.
    pub(crate) async fn recorded(sandbox_dir: &Path) -> Option<SandboxOwner> {
        let bytes = tokio::fs::read(sandbox_dir.join(OWNER_FILE)).await.ok()?;
        let owner: SandboxOwner = serde_json::from_slice(&bytes).ok()?;
        owner.check().ok().map(|()| owner)
    }

    /// Records the owner in a sandbox's directory (written aside and renamed: a reader never
    /// sees half a record).
    pub(crate) async fn record(&self, sandbox_dir: &Path) -> Result<(), SandboxError> {
        let aside = sandbox_dir.join(format!("+{OWNER_FILE}+{}", std::process::id()));
        let json = serde_json::to_vec(self).map_err(|error| SandboxError::io("recording the sandbox's owner")(std::io::Error::other(error)))?;
        tokio::fs::write(&aside, json).await.map_err(SandboxError::io("recording the sandbox's owner"))?;
        tokio::fs::rename(&aside, sandbox_dir.join(OWNER_FILE)).await.map_err(SandboxError::io("recording the sandbox's owner"))
    }
}

/// Which bound a sandbox is over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QuotaScope {
    /// The sandbox's own ([`crate::Limits::max_workspace_bytes`]).
    #[default]
    Sandbox,
    /// Its owner's sandboxes together ([`crate::Limits::max_subject_bytes`]).
    Subject,
    /// Its owner's tenant's sandboxes together ([`crate::Limits::max_tenant_bytes`]).
    Tenant,
}

impl QuotaScope {
    /// What is over the bound, as the model and the user read it, with its verb.
    pub fn what_is(self) -> &'static str {
        match self {
            QuotaScope::Sandbox => "the sandbox is",
            QuotaScope::Subject => "the sandboxes of this session's owner are together",
            QuotaScope::Tenant => "the sandboxes of this session's tenant are together",
        }
    }

    /// How room is made.
    pub fn remedy(self) -> &'static str {
        match self {
            QuotaScope::Sandbox => "delete files to make room",
            QuotaScope::Subject | QuotaScope::Tenant => {
                "delete files, or sessions no longer needed (their sandboxes go with them), to make room"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_with_empty_or_overlong_ids_are_refused() {
        assert!(SandboxOwner::new("acme", "user:alice").check().is_ok());
        assert!(SandboxOwner::new("", "user:alice").check().is_err());
        assert!(SandboxOwner::new("acme", "").check().is_err());
        assert!(SandboxOwner::new("acme", "x".repeat(MAX_ID_BYTES + 1)).check().is_err());
    }
}
