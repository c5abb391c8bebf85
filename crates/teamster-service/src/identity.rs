//! Who calls: API keys of subjects (users and service accounts) in tenants, each with a role.
//!
//! A key is `tsk_<id>_<secret>`: the id finds its record, the secret is checked against the
//! SHA-256 the record keeps (the secret itself is shown once, at creation, and stored nowhere).
//! Records live in the settings store (kind `api-key`), so every replica knows every key; a
//! revoked key stays listed, marked, and authenticates no more.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use teamster_protocol::{Subject, timestamp};
use teamster_store::SettingsStore;

use crate::error::{Result, ServiceError};
use crate::{Caller, Service};

/// The settings kind of API key records.
const SETTING_KIND: &str = "api-key";
/// What every key starts with.
const KEY_PREFIX: &str = "tsk_";
/// The longest subject or tenant name, in bytes.
const MAX_NAME_BYTES: usize = 128;

/// What a caller may do beyond its own sessions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Settings and keys too.
    Admin,
    /// Agents and its own sessions.
    #[default]
    Member,
}

/// An API key as listed: everything but its secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiKey {
    pub id: String,
    pub subject: Subject,
    pub tenant: String,
    pub role: Role,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
}

/// A key's stored record: the key as listed, and the digest of its secret.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct KeyRecord {
    #[serde(flatten)]
    key: ApiKey,
    /// Base64url of SHA-256 of the secret.
    secret_sha256: String,
}

/// A new key: its record, and the whole key, shown this once.
#[derive(Clone, Debug)]
pub struct CreatedKey {
    pub key: ApiKey,
    pub secret: String,
}

/// What a new key is for.
#[derive(Clone, Debug)]
pub struct NewKey {
    /// The subject's name (its id and slug); a service account when `service_account`.
    pub subject: String,
    pub service_account: bool,
    pub tenant: String,
    pub role: Role,
}

fn check_name(param: &'static str, name: &str) -> Result<()> {
    let fits = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"._-@".contains(&byte));
    match fits {
        true => Ok(()),
        false => Err(ServiceError::invalid_param(
            param,
            format!("a {param} is 1 to {MAX_NAME_BYTES} letters, digits, '.', '_', '-' and '@'"),
        )),
    }
}

fn random(bytes: usize) -> Result<String> {
    let mut buffer = vec![0; bytes];
    SystemRandom::new().fill(&mut buffer).map_err(|_| ServiceError::invalid("the system's random number generator failed"))?;
    Ok(URL_SAFE_NO_PAD.encode(buffer))
}

fn digest(secret: &str) -> String {
    URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, secret.as_bytes()))
}

/// Whether two byte strings are equal, in a time that depends on their length only.
fn same_bytes(left: &[u8], right: &[u8]) -> bool {
    left.len() == right.len() && left.iter().zip(right).fold(0, |differ, (a, b)| differ | (a ^ b)) == 0
}

/// The API keys kept in a settings store; [`Service`] uses them, and so can a command that
/// manages keys without running a server.
#[derive(Clone, Copy)]
pub struct ApiKeys<'a> {
    store: &'a dyn SettingsStore,
}

impl<'a> ApiKeys<'a> {
    pub fn new(store: &'a dyn SettingsStore) -> ApiKeys<'a> {
        ApiKeys { store }
    }

    /// Creates a key; the returned secret is the only copy.
    pub async fn create(&self, new: NewKey) -> Result<CreatedKey> {
        check_name("subject", &new.subject)?;
        check_name("tenant", &new.tenant)?;
        // The id is lowercase alphanumeric, so that `_` separates it from the secret.
        let id = random(12)?.to_ascii_lowercase().replace(['-', '_'], "0");
        let secret = random(32)?;
        let subject_type = if new.service_account { "service_account" } else { "user" };
        let key = ApiKey {
            id: id.clone(),
            // Names are unique within a tenant: the id names both, so ownership never crosses tenants.
            subject: Subject {
                subject_id: format!("{}:{}", new.tenant, new.subject),
                subject_type: subject_type.to_owned(),
                subject_slug: new.subject,
            },
            tenant: new.tenant,
            role: new.role,
            created_at: timestamp::now(),
            revoked_at: None,
        };
        self.put(&KeyRecord { key: key.clone(), secret_sha256: digest(&secret) }).await?;
        Ok(CreatedKey { key, secret: format!("{KEY_PREFIX}{id}_{secret}") })
    }

    /// Every key, revoked ones marked, by id.
    pub async fn list(&self) -> Result<Vec<ApiKey>> {
        let records = self.store.list_settings(SETTING_KIND).await?;
        Ok(records.into_iter().filter_map(|(_, value)| serde_json::from_str::<KeyRecord>(&value).ok()).map(|record| record.key).collect())
    }

    /// Revokes a key: it authenticates no more (404 for an unknown id).
    pub async fn revoke(&self, id: &str) -> Result<ApiKey> {
        let mut record = self.record(id).await?.ok_or_else(|| ServiceError::NotFound(format!("no API key {:?}", id.chars().take(64).collect::<String>())))?;
        if record.key.revoked_at.is_none() {
            record.key.revoked_at = Some(timestamp::now());
            self.put(&record).await?;
        }
        Ok(record.key)
    }

    /// The caller a bearer key stands for; `None` for a key that is malformed, unknown or
    /// revoked (callers answer all three alike).
    pub async fn authenticate(&self, bearer: &str) -> Result<Option<Caller>> {
        let Some((id, secret)) = bearer.strip_prefix(KEY_PREFIX).and_then(|rest| rest.split_once('_')) else { return Ok(None) };
        if id.is_empty() || id.len() > 64 || !id.bytes().all(|byte| byte.is_ascii_alphanumeric()) {
            return Ok(None);
        }
        let Some(record) = self.record(id).await? else { return Ok(None) };
        if !same_bytes(digest(secret).as_bytes(), record.secret_sha256.as_bytes()) || record.key.revoked_at.is_some() {
            return Ok(None);
        }
        Ok(Some(Caller { subject: record.key.subject, tenant: record.key.tenant, role: record.key.role }))
    }

    async fn put(&self, record: &KeyRecord) -> Result<()> {
        let value = serde_json::to_string(record).map_err(|error| ServiceError::invalid(error.to_string()))?;
        let at = record.key.revoked_at.as_deref().unwrap_or(&record.key.created_at);
        Ok(self.store.put_setting(SETTING_KIND, &record.key.id, &value, at).await?)
    }

    async fn record(&self, id: &str) -> Result<Option<KeyRecord>> {
        let Some(value) = self.store.get_setting(SETTING_KIND, id).await? else { return Ok(None) };
        serde_json::from_str(&value).map(Some).map_err(|error| ServiceError::invalid(format!("the key record {id:?} is unreadable: {error}")))
    }
}

impl Service {
    /// The server's API keys.
    pub fn api_keys(&self) -> ApiKeys<'_> {
        ApiKeys::new(self.store())
    }

    /// The caller a bearer key stands for (see [`ApiKeys::authenticate`]).
    pub async fn authenticate(&self, bearer: &str) -> Result<Option<Caller>> {
        self.api_keys().authenticate(bearer).await
    }
}
