//! An agent's collaborators (the manifest's `collaborators`): who, besides its creator and the
//! admins of its tenant, may see, run or manage a saved agent.
//!
//! A subject is `user:<name>` (the subject of that name in the agent's tenant) or
//! `team:<name>` (every subject of the tenant named `<name>`; since an agent is never seen
//! outside its own tenant, only a team naming the agent's tenant grants anything). A role is
//! [`AgentRole::MANAGER_ID`] (see, run, edit, delete and change the collaborators) or
//! [`AgentRole::USER_ID`] (see and run).

use serde::{Deserialize, Serialize};

/// One collaborator of an agent, as the manifest spells it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Collaborator {
    /// `user:<name>` or `team:<name>`.
    pub subject: String,
    /// `agent-manager` or `agent-user`.
    pub role_id: String,
}

/// What a collaborator may do with an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AgentRole {
    /// See the agent and run it (create sessions and turns).
    User,
    /// Everything a user may, and edit or delete the agent and change its collaborators.
    Manager,
}

impl AgentRole {
    pub const MANAGER_ID: &'static str = "agent-manager";
    pub const USER_ID: &'static str = "agent-user";

    /// The role a `role_id` names, if any.
    pub fn parse(role_id: &str) -> Option<AgentRole> {
        match role_id {
            AgentRole::MANAGER_ID => Some(AgentRole::Manager),
            AgentRole::USER_ID => Some(AgentRole::User),
            _ => None,
        }
    }
}

/// Whom a collaborator entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollaboratorSubject<'a> {
    /// The subject of this name (its slug) in the agent's tenant.
    User(&'a str),
    /// Every subject of the tenant of this name.
    Team(&'a str),
}

/// The longest name after `user:` or `team:`, in bytes.
pub const MAX_COLLABORATOR_NAME_BYTES: usize = 128;

impl CollaboratorSubject<'_> {
    /// Reads `user:<name>` or `team:<name>`; a name is 1 to 128 letters, digits, `.`, `_`,
    /// `-` and `@` (an e-mail address fits).
    pub fn parse(subject: &str) -> Option<CollaboratorSubject<'_>> {
        let (kind, name) = subject.split_once(':')?;
        let fits = !name.is_empty()
            && name.len() <= MAX_COLLABORATOR_NAME_BYTES
            && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"._-@".contains(&byte));
        match (kind, fits) {
            ("user", true) => Some(CollaboratorSubject::User(name)),
            ("team", true) => Some(CollaboratorSubject::Team(name)),
            _ => None,
        }
    }
}

impl Collaborator {
    /// The role this entry grants, if its role id is known.
    pub fn role(&self) -> Option<AgentRole> {
        AgentRole::parse(&self.role_id)
    }

    /// Whom this entry names, if its subject is well formed.
    pub fn named(&self) -> Option<CollaboratorSubject<'_>> {
        CollaboratorSubject::parse(&self.subject)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_and_roles_parse() {
        assert_eq!(CollaboratorSubject::parse("user:ann@example.com"), Some(CollaboratorSubject::User("ann@example.com")));
        assert_eq!(CollaboratorSubject::parse("team:acme"), Some(CollaboratorSubject::Team("acme")));
        for bad in ["ann", "user:", "group:x", "user:has space", "team:a:b", ""] {
            assert_eq!(CollaboratorSubject::parse(bad), None, "{bad}");
        }
        assert_eq!(AgentRole::parse("agent-manager"), Some(AgentRole::Manager));
        assert_eq!(AgentRole::parse("agent-user"), Some(AgentRole::User));
        assert_eq!(AgentRole::parse("owner"), None);
        assert!(AgentRole::Manager > AgentRole::User);
    }
}
