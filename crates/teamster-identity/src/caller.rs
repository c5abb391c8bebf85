//! Who makes a request: a [`Caller`], with the [`Role`] that says what it may do beyond its own
//! sessions.

use serde::{Deserialize, Serialize};
use teamster_protocol::Subject;

use crate::IdentityError;

/// What a caller may do beyond its own sessions.
///
/// A key record stored before the operator role existed says `admin`, and stays a tenant admin:
/// the operator makes an operator key with `teamster keys create --role operator`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The server's operator: settings, model providers, MCP servers, skills, the metrics and
    /// every tenant's keys; and, within its own tenant, what a tenant admin may do.
    Operator,
    /// A tenant's admin: the keys, agents and sessions of its own tenant only.
    Admin,
    /// Agents and its own sessions.
    #[default]
    Member,
}

/// Who makes a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub subject: Subject,
    /// The tenant the subject belongs to.
    pub tenant: String,
    pub role: Role,
    /// The id of the API key the request was made with (`None` without one: the local operator,
    /// an OIDC login, work outside any request). What the caller leaves queued (follow-ups,
    /// steering) starts only while that key is in force.
    pub key_id: Option<String>,
}

impl Caller {
    /// The one caller of a server without authentication: the operator.
    pub fn local() -> Caller {
        Caller { subject: Subject::local(), tenant: "local".to_owned(), role: Role::Operator, key_id: None }
    }

    /// A subject acting on what it owns, outside any request (a follow-up it queued).
    pub fn owner(subject: Subject) -> Caller {
        Caller { subject, tenant: String::new(), role: Role::Member, key_id: None }
    }

    /// Whether the caller is the server's operator.
    pub fn is_operator(&self) -> bool {
        self.role == Role::Operator
    }

    /// Whether the caller administers its own tenant (a tenant admin, or the operator).
    pub fn is_tenant_admin(&self) -> bool {
        matches!(self.role, Role::Admin | Role::Operator)
    }

    /// Whether the caller may manage what belongs to `tenant`: the operator any tenant's, a
    /// tenant admin its own tenant's only.
    pub fn administers(&self, tenant: &str) -> bool {
        match self.role {
            Role::Operator => true,
            Role::Admin => !self.tenant.is_empty() && self.tenant == tenant,
            Role::Member => false,
        }
    }

    /// Refuses (403) a caller that is neither a tenant admin nor the operator.
    pub fn require_admin(&self) -> Result<(), IdentityError> {
        match self.is_tenant_admin() {
            true => Ok(()),
            false => Err(IdentityError::Forbidden("only an admin may do this".to_owned())),
        }
    }

    /// Refuses (403) a caller that is not the operator (what is server-wide: settings, model
    /// providers, MCP servers, skills, the metrics).
    pub fn require_operator(&self) -> Result<(), IdentityError> {
        match self.is_operator() {
            true => Ok(()),
            false => Err(IdentityError::Forbidden("only the server's operator may do this".to_owned())),
        }
    }
}
