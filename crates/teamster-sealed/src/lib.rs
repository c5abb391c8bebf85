//! Secrets at rest: the credentials settings documents carry (model providers' API keys, MCP
//! servers' header and environment values, and an MCP server's URL when it has user info, a
//! query or a fragment, which may hold credentials) are stored sealed under the service's secret
//! key, with the cipher that seals MCP OAuth tokens.
//!
//! Only the secret values are sealed; the rest of a document stays readable JSON. A sealed value
//! is `sealed:` followed by the cipher's text, bound to its kind, name and field, so a value
//! copied to another document or field does not open. A value without the prefix is plain text,
//! as written before sealing (or without a key): it still reads, and the service seals such
//! documents when it starts ([`SealedSettings::seal_plain`]). Without a secret key (the embedded
//! runtime and tests by default) values are stored as given: a random key would lose them.
//!
//! A document whose secrets this server's key cannot open (another replica sealed it under
//! another key) is skipped where settings are listed, and remembered: the server is not ready
//! while there is one ([`SealedSettings::unopenable`]), since replicas sharing a store need the
//! same key.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde::de::DeserializeOwned;
use teamster_mcp::oauth::{CipherError, TokenCipher, TokenKey};
use teamster_protocol::settings::{McpServerAuth, McpServerManifest, ModelProviderManifest};
use teamster_protocol::timestamp;
use teamster_store::SettingsStore;

/// What to do about settings sealed under another key.
const SAME_KEY: &str = "every replica that shares a database needs the same secret key (the same \
    `--secret-key-file` contents, or the same `TEAMSTER_SECRET_KEY`) as the one that stored them";

/// What marks a sealed value in a stored document.
const SEALED_PREFIX: &str = "sealed:";

/// Why sealed settings could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SealedError {
    /// The document could not be written as sealed (it is no valid document).
    #[error("{0}")]
    Invalid(String),
    /// A stored document cannot be read, most likely sealed under another key.
    #[error("{0}")]
    Unreadable(String),
    #[error(transparent)]
    Store(#[from] teamster_store::Error),
}

pub type Result<T, E = SealedError> = std::result::Result<T, E>;

/// Seals and opens the secret values of settings documents.
#[derive(Clone)]
pub struct SealedSettings {
    /// `None` without a secret key: values are stored as given.
    cipher: Option<Arc<TokenCipher>>,
    /// The names of the documents, by kind, whose secrets the last listing of that kind could
    /// not open; shared by every clone.
    unopenable: Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>,
}

/// Why a stored settings document cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("it is not a valid document: {0}")]
    Json(#[from] serde_json::Error),
    #[error("its secret {field} cannot be opened: {source}")]
    Cipher { field: String, source: CipherError },
    #[error("its secret {field} is sealed, and this server has no secret key")]
    NoKey { field: String },
}

/// A settings document whose secret values can be sealed: each with a name of its place.
pub trait Secrets: Serialize + DeserializeOwned {
    fn secrets_mut(&mut self) -> Vec<(String, &mut String)>;
}

impl Secrets for ModelProviderManifest {
    fn secrets_mut(&mut self) -> Vec<(String, &mut String)> {
        self.auth.iter_mut().map(|auth| ("auth.api_key".to_owned(), &mut auth.api_key)).collect()
    }
}

impl Secrets for McpServerManifest {
    fn secrets_mut(&mut self) -> Vec<(String, &mut String)> {
        let headers = match &mut self.auth {
            Some(McpServerAuth::Header { headers }) => Some(headers),
            _ => None,
        };
        let headers = headers.into_iter().flatten().map(|(name, value)| (format!("auth.headers.{name}"), value));
        let env = self.env.iter_mut().flatten().map(|(name, value)| (format!("env.{name}"), value));
        // A URL is sealed whole when it may carry credentials (or is sealed already).
        let url = self.url.as_mut().filter(|url| url.starts_with(SEALED_PREFIX) || may_carry_credentials(url));
        headers.chain(env).chain(url.map(|url| ("url".to_owned(), url))).collect()
    }
}

/// Whether a URL has user info, a query or a fragment: places credentials are put in. Text
/// that is no URL but looks as if it had one of them counts too.
fn may_carry_credentials(url: &str) -> bool {
    match reqwest::Url::parse(url) {
        Ok(parsed) => {
            !parsed.username().is_empty() || parsed.password().is_some() || parsed.query().is_some() || parsed.fragment().is_some()
        }
        Err(_) => url.contains(['@', '?', '#']),
    }
}

impl SealedSettings {
    /// Sealing under `key`; `None` stores values as given.
    pub fn new(key: Option<&TokenKey>) -> SealedSettings {
        SealedSettings { cipher: key.map(|key| Arc::new(TokenCipher::new(key))), unopenable: Arc::default() }
    }

    /// The text to store for the document `name` of `kind`, its secrets sealed.
    pub fn seal<T: Secrets>(&self, kind: &str, name: &str, document: &T) -> Result<String> {
        let invalid = |error: &dyn std::fmt::Display| SealedError::Invalid(error.to_string());
        let mut value: T = serde_json::from_value(serde_json::to_value(document).map_err(|error| invalid(&error))?)
            .map_err(|error| invalid(&error))?;
        if let Some(cipher) = &self.cipher {
            for (field, secret) in value.secrets_mut() {
                let sealed = cipher.seal(secret.as_bytes(), &context(kind, name, &field)).map_err(|error| invalid(&error))?;
                *secret = format!("{SEALED_PREFIX}{sealed}");
            }
        }
        serde_json::to_string(&value).map_err(|error| invalid(&error))
    }

    /// Reads a stored document, opening its sealed secrets; also whether a secret of it is
    /// still in plain text.
    pub fn open<T: Secrets>(&self, kind: &str, name: &str, stored: &str) -> Result<(T, bool), SealError> {
        let mut document: T = serde_json::from_str(stored)?;
        let mut plain = false;
        for (field, secret) in document.secrets_mut() {
            let Some(sealed) = secret.strip_prefix(SEALED_PREFIX) else {
                plain = true;
                continue;
            };
            let cipher = self.cipher.as_ref().ok_or_else(|| SealError::NoKey { field: field.clone() })?;
            let opened = cipher.open(sealed, &context(kind, name, &field)).map_err(|source| SealError::Cipher { field: field.clone(), source })?;
            *secret = String::from_utf8(opened).map_err(|_| SealError::Cipher { field, source: CipherError::Decode })?;
        }
        Ok((document, plain))
    }

    /// Every readable document of `kind`, by name; unreadable ones are logged and skipped, and
    /// those whose secrets this key cannot open are remembered ([`SealedSettings::unopenable`]).
    pub async fn list<T: Secrets>(&self, store: &dyn SettingsStore, kind: &str) -> Result<Vec<(String, T)>> {
        let mut documents = Vec::new();
        let mut unopenable = BTreeSet::new();
        for (name, stored) in store.list_settings(kind).await? {
            match self.open(kind, &name, &stored) {
                Ok((document, _)) => documents.push((name, document)),
                Err(error @ (SealError::Cipher { .. } | SealError::NoKey { .. })) => {
                    tracing::error!(%kind, %name, %error, "a stored setting cannot be opened with this server's secret key; skipped");
                    unopenable.insert(name);
                }
                Err(error) => tracing::error!(%kind, %name, %error, "a stored setting is unreadable; skipped"),
            }
        }
        let mut remembered = self.unopenable.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match unopenable.is_empty() {
            true => remembered.remove(kind),
            false => remembered.insert(kind.to_owned(), unopenable),
        };
        Ok(documents)
    }

    /// One stored document of `kind`; an error when it cannot be read.
    pub async fn get<T: Secrets>(&self, store: &dyn SettingsStore, kind: &str, name: &str) -> Result<Option<T>> {
        let Some(stored) = store.get_setting(kind, name).await? else { return Ok(None) };
        let (document, _) = self.open(kind, name, &stored).map_err(|error| {
            SealedError::Unreadable(format!("the stored {kind} {name:?} cannot be read: {error}; {SAME_KEY}"))
        })?;
        Ok(Some(document))
    }

    /// What is wrong when the last listings met documents whose secrets this server's key
    /// cannot open (`kind name` of each), with what to do; `None` when there were none.
    pub fn unopenable(&self) -> Option<String> {
        let remembered = self.unopenable.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let names: Vec<String> =
            remembered.iter().flat_map(|(kind, names)| names.iter().map(move |name| format!("{kind} {name:?}"))).collect();
        (!names.is_empty()).then(|| {
            format!(
                "this server's secret key cannot open the secrets of stored settings ({}), so they are not in force; {SAME_KEY}",
                names.join(", ")
            )
        })
    }

    /// Stores the document `name` of `kind`, its secrets sealed.
    pub async fn put<T: Secrets>(&self, store: &dyn SettingsStore, kind: &str, name: &str, document: &T) -> Result<()> {
        let value = self.seal(kind, name, document)?;
        Ok(store.put_setting(kind, name, &value, &timestamp::now()).await?)
    }

    /// Seals every stored provider (of `provider_kind`) and MCP server (of `server_kind`) that
    /// still holds a secret in plain text.
    pub async fn seal_all_plain(&self, store: &dyn SettingsStore, provider_kind: &str, server_kind: &str) -> Result<()> {
        let providers = self.seal_plain::<ModelProviderManifest>(store, provider_kind).await?;
        let servers = self.seal_plain::<McpServerManifest>(store, server_kind).await?;
        if providers + servers > 0 {
            store.scrub_overwritten_settings().await?;
            tracing::info!(providers, mcp_servers = servers, "sealed the secrets stored in plain text");
        }
        Ok(())
    }

    /// Seals the documents of `kind` that still hold a secret in plain text (written before
    /// sealing, or without a key); returns how many. A document another replica rewrote since
    /// it was read here is left to that write.
    pub async fn seal_plain<T: Secrets>(&self, store: &dyn SettingsStore, kind: &str) -> Result<usize> {
        if self.cipher.is_none() {
            return Ok(0);
        }
        let mut sealed = 0;
        for (name, stored) in store.list_settings(kind).await? {
            let Ok((document, true)) = self.open::<T>(kind, &name, &stored) else { continue };
            if store.get_setting(kind, &name).await?.as_deref() == Some(stored.as_str()) {
                self.put(store, kind, &name, &document).await?;
                sealed += 1;
            }
        }
        Ok(sealed)
    }
}

/// What a sealed value is bound to: its document and field.
fn context(kind: &str, name: &str, field: &str) -> Vec<u8> {
    format!("teamster setting\0{kind}\0{name}\0{field}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(api_key: &str) -> ModelProviderManifest {
        serde_json::from_value(serde_json::json!({
            "type": "custom", "name": "p", "base_url": "http://127.0.0.1:1/v1", "auth": {"api_key": api_key},
            "models": [{"name": "m", "model_id": "m"}],
        }))
        .unwrap()
    }

    fn server(secret: &str) -> McpServerManifest {
        serde_json::from_value(serde_json::json!({
            "type": "remote", "name": "tools", "description": "Test tools.", "url": "http://127.0.0.1:1/mcp",
            "auth": {"type": "header", "headers": {"Authorization": secret}},
        }))
        .unwrap()
    }

    fn sealing() -> SealedSettings {
        SealedSettings::new(Some(&TokenKey::generate().unwrap()))
    }

    #[test]
    fn secrets_are_sealed_and_open_only_in_their_place() {
        let settings = sealing();
        let stored = settings.seal("model-provider", "p", &provider("sk-secret")).unwrap();
        assert!(!stored.contains("sk-secret"), "{stored}");
        assert!(stored.contains("\"models\""), "the rest stays readable: {stored}");
        let (opened, plain) = settings.open::<ModelProviderManifest>("model-provider", "p", &stored).unwrap();
        assert_eq!((opened, plain), (provider("sk-secret"), false));
        assert!(matches!(
            settings.open::<ModelProviderManifest>("model-provider", "other", &stored),
            Err(SealError::Cipher { source: CipherError::Tampered, .. })
        ));
        assert!(matches!(
            sealing().open::<ModelProviderManifest>("model-provider", "p", &stored),
            Err(SealError::Cipher { source: CipherError::WrongKey, .. })
        ));
        assert!(matches!(
            SealedSettings::new(None).open::<ModelProviderManifest>("model-provider", "p", &stored),
            Err(SealError::NoKey { .. })
        ));

        let stored = settings.seal("mcp-server", "tools", &server("Bearer s3cret")).unwrap();
        assert!(!stored.contains("s3cret"), "{stored}");
        assert_eq!(settings.open::<McpServerManifest>("mcp-server", "tools", &stored).unwrap(), (server("Bearer s3cret"), false));

        // A URL with credentials is sealed whole; one without stays readable.
        let mut credentialed = server("Bearer s3cret");
        credentialed.url = Some("http://svc:PASS@127.0.0.1:1/mcp?api_key=SECRET".to_owned());
        let stored = settings.seal("mcp-server", "tools", &credentialed).unwrap();
        assert!(!stored.contains("PASS") && !stored.contains("SECRET") && stored.contains("\"url\":\"sealed:"), "{stored}");
        assert_eq!(settings.open::<McpServerManifest>("mcp-server", "tools", &stored).unwrap(), (credentialed.clone(), false));
        let plain = serde_json::to_string(&credentialed).unwrap();
        assert!(settings.open::<McpServerManifest>("mcp-server", "tools", &plain).unwrap().1, "a plain credentialed URL is resealed");
        assert!(settings.seal("mcp-server", "tools", &server("Bearer s3cret")).unwrap().contains("\"url\":\"http://127.0.0.1:1/mcp\""));

        let stdio: McpServerManifest = serde_json::from_value(serde_json::json!({
            "type": "stdio", "name": "local", "description": "d", "command": "python", "env": {"TOKEN": "env-s3cret"}
        }))
        .unwrap();
        let stored = settings.seal("mcp-server", "local", &stdio).unwrap();
        assert!(!stored.contains("env-s3cret") && stored.contains("\"TOKEN\":\"sealed:"), "{stored}");
        assert_eq!(settings.open::<McpServerManifest>("mcp-server", "local", &stored).unwrap(), (stdio, false));
    }

    #[tokio::test]
    async fn plain_documents_still_read_and_are_sealed_at_start() {
        let settings = sealing();
        let plain = serde_json::to_string(&provider("sk-old")).unwrap();
        assert_eq!(settings.open::<ModelProviderManifest>("model-provider", "p", &plain).unwrap(), (provider("sk-old"), true));
        // Without a key, documents are stored as given.
        assert_eq!(SealedSettings::new(None).seal("model-provider", "p", &provider("sk-old")).unwrap(), plain);

        let store = teamster_store_sqlite::SqliteStore::connect("sqlite::memory:").await.unwrap();
        store.put_setting("model-provider", "p", &plain, "t").await.unwrap();
        assert_eq!(settings.seal_plain::<ModelProviderManifest>(&store, "model-provider").await.unwrap(), 1);
        let stored = store.get_setting("model-provider", "p").await.unwrap().unwrap();
        assert!(!stored.contains("sk-old"), "{stored}");
        let listed = settings.list::<ModelProviderManifest>(&store, "model-provider").await.unwrap();
        assert_eq!(listed, vec![("p".to_owned(), provider("sk-old"))]);
        assert_eq!(settings.seal_plain::<ModelProviderManifest>(&store, "model-provider").await.unwrap(), 0);
        assert_eq!(settings.unopenable(), None);

        // Another key lists nothing, remembers what it could not open, and says what to do.
        let other = sealing();
        assert!(other.list::<ModelProviderManifest>(&store, "model-provider").await.unwrap().is_empty());
        let message = other.unopenable().expect("the provider cannot be opened");
        assert!(message.contains("model-provider \"p\"") && message.contains("TEAMSTER_SECRET_KEY"), "{message}");
        assert!(matches!(other.get::<ModelProviderManifest>(&store, "model-provider", "p").await, Err(SealedError::Unreadable(_))));
        // Once it is gone, the next listing forgets it.
        store.delete_setting("model-provider", "p").await.unwrap();
        other.list::<ModelProviderManifest>(&store, "model-provider").await.unwrap();
        assert_eq!(other.unopenable(), None);
    }
}
