//! Who a sandbox belongs to, and the disk quota of everything one subject or one tenant holds.
//!
//! A sandbox is bounded on its own ([`crate::Limits::max_workspace_bytes`]), but a subject with
//! many sessions would hold that much in each of them. So each sandbox records its owner (the
//! session's creator and their tenant) in its directory, and the provider's ledger keeps running
//! totals of the last measurements of every sandbox it knows, per subject and per tenant. A
//! command starts over the quota, a running command is killed, and a write is refused, when the
//! sandbox's owner is over its subject's or its tenant's bound, as for the sandbox's own.
//!
//! The totals are what this process measured: at start, and at every sweep of idle sandboxes,
//! the provider learns the sandboxes under its root it did not make (after a restart, or made by
//! another replica sharing the root) and measures them in the background.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::SandboxError;
use crate::quota::{Quota, Usage};

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

/// The bounds of what one subject's and one tenant's sandboxes hold together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OwnerQuotas {
    pub(crate) subject: Quota,
    pub(crate) tenant: Quota,
}

/// The usage of every known sandbox, summed per subject and per tenant.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    subjects: HashMap<(String, String), Usage>,
    tenants: HashMap<String, Usage>,
}

impl Totals {
    /// Counts a sandbox's usage for its owner.
    pub(crate) fn add(&mut self, owner: &SandboxOwner, usage: &Usage) {
        let subject = self.subjects.entry((owner.tenant.clone(), owner.subject.clone())).or_insert(Usage::EMPTY);
        *subject = plus(subject, usage);
        let tenant = self.tenants.entry(owner.tenant.clone()).or_insert(Usage::EMPTY);
        *tenant = plus(tenant, usage);
    }

    /// Stops counting a sandbox's usage (one [`Totals::add`] earlier) for its owner.
    pub(crate) fn remove(&mut self, owner: &SandboxOwner, usage: &Usage) {
        let key = (owner.tenant.clone(), owner.subject.clone());
        if let Some(subject) = self.subjects.get_mut(&key) {
            *subject = minus(subject, usage);
            if subject.bytes == 0 && subject.files == 0 {
                self.subjects.remove(&key);
            }
        }
        if let Some(tenant) = self.tenants.get_mut(&owner.tenant) {
            *tenant = minus(tenant, usage);
            if tenant.bytes == 0 && tenant.files == 0 {
                self.tenants.remove(&owner.tenant);
            }
        }
    }

    /// What the owner's sandboxes, and its tenant's, hold together.
    pub(crate) fn of(&self, owner: &SandboxOwner) -> (Usage, Usage) {
        let subject = self.subjects.get(&(owner.tenant.clone(), owner.subject.clone())).copied().unwrap_or(Usage::EMPTY);
        let tenant = self.tenants.get(&owner.tenant).copied().unwrap_or(Usage::EMPTY);
        (subject, tenant)
    }
}

fn plus(total: &Usage, usage: &Usage) -> Usage {
    Usage { bytes: total.bytes.saturating_add(usage.bytes), files: total.files.saturating_add(usage.files), complete: true }
}

fn minus(total: &Usage, usage: &Usage) -> Usage {
    Usage { bytes: total.bytes.saturating_sub(usage.bytes), files: total.files.saturating_sub(usage.files), complete: true }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(bytes: u64, files: u64) -> Usage {
        Usage { bytes, files, complete: true }
    }

    #[test]
    fn totals_follow_each_owner_and_tenant() {
        let (alice, bob, carol) =
            (SandboxOwner::new("acme", "user:alice"), SandboxOwner::new("acme", "user:bob"), SandboxOwner::new("globex", "user:alice"));
        let mut totals = Totals::default();
        totals.add(&alice, &usage(100, 2));
        totals.add(&alice, &usage(50, 1));
        totals.add(&bob, &usage(10, 1));
        totals.add(&carol, &usage(7, 1));
        assert_eq!(totals.of(&alice), (usage(150, 3), usage(160, 4)));
        assert_eq!(totals.of(&bob), (usage(10, 1), usage(160, 4)));
        // The same subject id in another tenant is another owner.
        assert_eq!(totals.of(&carol), (usage(7, 1), usage(7, 1)));
        totals.remove(&alice, &usage(100, 2));
        assert_eq!(totals.of(&alice), (usage(50, 1), usage(60, 2)));
        totals.remove(&alice, &usage(50, 1));
        totals.remove(&bob, &usage(10, 1));
        assert_eq!(totals.of(&alice), (Usage::EMPTY, Usage::EMPTY));
        assert!(totals.subjects.len() == 1 && totals.tenants.len() == 1, "emptied owners are dropped: {totals:?}");
    }

    #[test]
    fn owners_with_empty_or_overlong_ids_are_refused() {
        assert!(SandboxOwner::new("acme", "user:alice").check().is_ok());
        assert!(SandboxOwner::new("", "user:alice").check().is_err());
        assert!(SandboxOwner::new("acme", "").check().is_err());
        assert!(SandboxOwner::new("acme", "x".repeat(MAX_ID_BYTES + 1)).check().is_err());
    }
}
