//! Who calls: API keys of subjects (users and service accounts) in tenants, each with a role.
//!
//! A key is `tsk_<id>_<secret>`: the id finds its record, the secret is checked against the
//! SHA-256 the record keeps (the secret itself is shown once, at creation, and stored nowhere).
//! Records live in the settings store (kind `api-key`), so every replica knows every key; a
//! revoked key stays listed, marked, and authenticates no more.
//!
//! Authenticating reads the key's record from the store only the first time a replica sees the
//! key, then from this replica's [`KeyCache`]: a revocation or a new key on this replica drops
//! the cached record at once, one on another replica drops every cached record when the store's
//! change feed announces the `api-key` setting (a lost announcement is a `Missed` one, which
//! drops them too), and a record is read again at the latest [`KEY_CACHE_TTL`] after it was
//! cached. The secret is checked against the record's digest on every request.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use teamster_protocol::{Subject, timestamp};
use teamster_store::SettingsStore;

use crate::{Caller, IdentityError, Role};

type Result<T, E = IdentityError> = std::result::Result<T, E>;

/// The settings kind of API key records.
pub const SETTING_KIND: &str = "api-key";
/// How long a cached key record is trusted without reading it again.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(30);
/// The most key records a replica caches; past it, the cache starts again empty.
const KEY_CACHE_ENTRIES: usize = 10_000;
/// What every key starts with.
const KEY_PREFIX: &str = "tsk_";
/// The longest subject or tenant name, in bytes.
const MAX_NAME_BYTES: usize = 128;

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
        false => Err(IdentityError::invalid_param(
            param,
            format!("a {param} is 1 to {MAX_NAME_BYTES} letters, digits, '.', '_', '-' and '@'"),
        )),
    }
}

fn random(bytes: usize) -> Result<String> {
    let mut buffer = vec![0; bytes];
    SystemRandom::new().fill(&mut buffer).map_err(|_| IdentityError::invalid("the system's random number generator failed"))?;
    Ok(URL_SAFE_NO_PAD.encode(buffer))
}

fn digest(secret: &str) -> String {
    URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, secret.as_bytes()))
}

/// Whether two byte strings are equal, in a time that depends on their length only.
fn same_bytes(left: &[u8], right: &[u8]) -> bool {
    left.len() == right.len() && left.iter().zip(right).fold(0, |differ, (a, b)| differ | (a ^ b)) == 0
}

/// The 404 of a key id that is unknown (or not the caller's to manage).
fn unknown_key(id: &str) -> IdentityError {
    IdentityError::NotFound(format!("no API key {:?}", id.chars().take(64).collect::<String>()))
}

/// Whether `caller` manages `key`: the operator every key, a tenant admin its own tenant's keys
/// but operator keys.
fn manages(caller: &Caller, key: &ApiKey) -> bool {
    caller.is_operator() || (key.role != Role::Operator && caller.administers(&key.tenant))
}

/// This replica's copies of key records it has authenticated with, by key id.
#[derive(Debug, Default)]
pub struct KeyCache {
    records: Mutex<HashMap<String, (KeyRecord, Instant)>>,
    /// Counts the records forgotten: a record read from the store is cached only if nothing was
    /// forgotten while it was read, so a revocation racing the read is never undone.
    generation: AtomicU64,
}

impl KeyCache {
    fn get(&self, id: &str) -> Option<KeyRecord> {
        let records = self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        records.get(id).filter(|(_, at)| at.elapsed() < KEY_CACHE_TTL).map(|(record, _)| record.clone())
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Caches `record`, read from the store since [`KeyCache::generation`] was `read_at`.
    fn put(&self, record: KeyRecord, read_at: u64) {
        let mut records = self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.generation() != read_at {
            return;
        }
        if records.len() >= KEY_CACHE_ENTRIES {
            records.clear();
        }
        records.insert(record.key.id.clone(), (record, Instant::now()));
    }

    fn forget(&self, id: &str) {
        let mut records = self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.generation.fetch_add(1, Ordering::AcqRel);
        records.remove(id);
    }

    /// Drops every cached record (another replica changed a key).
    pub fn forget_all(&self) {
        let mut records = self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.generation.fetch_add(1, Ordering::AcqRel);
        records.clear();
    }
}

/// The API keys kept in a settings store; a server uses them with its replica's [`KeyCache`]
/// ([`ApiKeys::cached`]), and so can a command that manages keys without running a server.
#[derive(Clone, Copy)]
pub struct ApiKeys<'a> {
    store: &'a dyn SettingsStore,
    /// The replica's cache of records, for a server.
    cache: Option<&'a KeyCache>,
}

impl<'a> ApiKeys<'a> {
    pub fn new(store: &'a dyn SettingsStore) -> ApiKeys<'a> {
        ApiKeys { store, cache: None }
    }

    /// The keys of `store`, with a replica's cache of the records it authenticated with.
    pub fn cached(store: &'a dyn SettingsStore, cache: &'a KeyCache) -> ApiKeys<'a> {
        ApiKeys { store, cache: Some(cache) }
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
        let mut record = self.record(id).await?.ok_or_else(|| unknown_key(id))?;
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
        let Some(record) = self.cached_record(id).await? else { return Ok(None) };
        if !same_bytes(digest(secret).as_bytes(), record.secret_sha256.as_bytes()) || record.key.revoked_at.is_some() {
            return Ok(None);
        }
        Ok(Some(Caller { subject: record.key.subject, tenant: record.key.tenant, role: record.key.role, key_id: Some(record.key.id) }))
    }

    /// Creates a key on `caller`'s behalf: the operator in any tenant and of any role, a tenant
    /// admin only in its own tenant and never an operator key (403 otherwise).
    pub async fn create_for(&self, caller: &Caller, new: NewKey) -> Result<CreatedKey> {
        if new.role == Role::Operator && !caller.is_operator() {
            return Err(IdentityError::Forbidden("only the server's operator may create an operator key".to_owned()));
        }
        if !caller.administers(&new.tenant) {
            return Err(IdentityError::Forbidden("a tenant admin creates keys in its own tenant only".to_owned()));
        }
        self.create(new).await
    }

    /// The keys `caller` manages, revoked ones marked: every key for the operator, the keys of
    /// its own tenant but the operator's for a tenant admin.
    pub async fn list_for(&self, caller: &Caller) -> Result<Vec<ApiKey>> {
        let mut keys = self.list().await?;
        keys.retain(|key| manages(caller, key));
        Ok(keys)
    }

    /// Revokes a key on `caller`'s behalf: a key `caller` does not manage is answered as an
    /// unknown one (404), so no tenant learns another's key ids.
    pub async fn revoke_for(&self, caller: &Caller, id: &str) -> Result<ApiKey> {
        let known = self.record(id).await?.is_some_and(|record| manages(caller, &record.key));
        if !known {
            return Err(unknown_key(id));
        }
        self.revoke(id).await
    }

    /// Whether a key exists and is not revoked, as the store says now (never from a replica's
    /// cache: a revocation on another replica counts at once).
    pub async fn in_force(&self, id: &str) -> Result<bool> {
        Ok(self.record(id).await?.is_some_and(|record| record.key.revoked_at.is_none()))
    }

    async fn put(&self, record: &KeyRecord) -> Result<()> {
        let value = serde_json::to_string(record).map_err(|error| IdentityError::invalid(error.to_string()))?;
        let at = record.key.revoked_at.as_deref().unwrap_or(&record.key.created_at);
        let stored = self.store.put_setting(SETTING_KIND, &record.key.id, &value, at).await;
        // Forgotten after the write (and also when it failed), so no request reads the old record
        // back into the cache after it.
        if let Some(cache) = self.cache {
            cache.forget(&record.key.id);
        }
        Ok(stored?)
    }

    /// Whether a key is still in force, as [`ApiKeys::authenticate`] would find it (through the
    /// cache: a revocation counts at once on this replica, and on another within
    /// [`KEY_CACHE_TTL`]). For work that outlives the request that authenticated it, such as a
    /// live channel.
    pub async fn still_in_force(&self, id: &str) -> Result<bool> {
        Ok(self.cached_record(id).await?.is_some_and(|record| record.key.revoked_at.is_none()))
    }

    /// A key's record, from the cache when it holds a fresh one (then cached).
    async fn cached_record(&self, id: &str) -> Result<Option<KeyRecord>> {
        if let Some(record) = self.cache.and_then(|cache| cache.get(id)) {
            return Ok(Some(record));
        }
        let read_at = self.cache.map(KeyCache::generation);
        let Some(record) = self.record(id).await? else { return Ok(None) };
        if let (Some(cache), Some(read_at)) = (self.cache, read_at) {
            cache.put(record.clone(), read_at);
        }
        Ok(Some(record))
    }

    async fn record(&self, id: &str) -> Result<Option<KeyRecord>> {
        let Some(value) = self.store.get_setting(SETTING_KIND, id).await? else { return Ok(None) };
        serde_json::from_str(&value).map(Some).map_err(|error| IdentityError::invalid(format!("the key record {id:?} is unreadable: {error}")))
    }
}
