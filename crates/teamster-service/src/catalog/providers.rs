//! Model-provider settings: the configured providers and the registry built from them
//! ([`ModelProviders`], a room of the catalog with a lock of its own).

use std::collections::BTreeMap;
use std::sync::Arc;

use teamster_llm::registry::{ModelRegistry, RegistryOptions, validate_manifest};
use teamster_protocol::settings::{ConfiguredModelProvider, ModelProviderManifest, REDACTED};
use teamster_llm::providers::offline::OFFLINE_PROVIDER;
use teamster_protocol::settings::{AvailableModel, AvailableModelProvider};
use teamster_store::{SettingsStore, UsageStore};

use crate::error::{Result, ServiceError};
use teamster_sealed::SealedSettings;

/// The model providers in force: the environment's, overridden by name by those stored
/// through the settings API (API keys sealed), and the registry built from them.
pub struct ModelProviders {
    settings: Arc<dyn SettingsStore>,
    /// Counts each tenant's uses of each model.
    uses: Arc<super::model_uses::ModelUses>,
    /// Seals the providers' API keys in the store.
    sealed: SealedSettings,
    /// Providers from the environment; stored ones override them by name.
    env_providers: Vec<ModelProviderManifest>,
    /// The providers in force and the registry built from them.
    in_force: std::sync::RwLock<Providers>,
    /// Serialises writes, so the store and the registry agree on the last one.
    writes: tokio::sync::Mutex<()>,
}

/// The providers in force, by name, and the registry that resolves `provider/model` names.
struct Providers {
    manifests: BTreeMap<String, ModelProviderManifest>,
    registry: Arc<ModelRegistry>,
    /// One connection pool shared by every provider client.
    http: reqwest::Client,
    options: RegistryOptions,
}

/// The settings kind under which providers are stored.
pub(crate) const SETTING_KIND: &str = "model-provider";

impl Providers {
    /// The manifests in force: the environment's, overridden by name by the stored ones.
    async fn manifests(
        store: &dyn SettingsStore,
        sealed: &SealedSettings,
        env_providers: &[ModelProviderManifest],
    ) -> Result<BTreeMap<String, ModelProviderManifest>> {
        let mut manifests: BTreeMap<String, ModelProviderManifest> = env_providers
            .iter()
            .map(|manifest| (manifest.provider_name().to_owned(), manifest.clone()))
            .collect();
        manifests.extend(sealed.list(store, SETTING_KIND).await?);
        Ok(manifests)
    }

    fn from_manifests(
        manifests: BTreeMap<String, ModelProviderManifest>,
        http: reqwest::Client,
        options: RegistryOptions,
    ) -> Providers {
        let registry = Arc::new(ModelRegistry::with_options(manifests.values().cloned(), http.clone(), options));
        Providers { manifests, registry, http, options }
    }
}

/// How a provider write treats an existing provider of the same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderWrite {
    /// `POST`: fail if the name is taken.
    Create,
    /// `PUT`: create or replace.
    Upsert,
}

impl ModelProviders {
    /// Loads the providers in force: `env_providers`, overridden by name by the stored ones.
    pub(crate) async fn load(
        settings: Arc<dyn SettingsStore>,
        usage: Arc<dyn UsageStore>,
        sealed: SealedSettings,
        env_providers: Vec<ModelProviderManifest>,
        options: RegistryOptions,
    ) -> Result<ModelProviders> {
        let manifests = Providers::manifests(settings.as_ref(), &sealed, &env_providers).await?;
        let in_force = Providers::from_manifests(manifests, reqwest::Client::new(), options);
        Ok(ModelProviders {
            settings,
            uses: super::model_uses::ModelUses::start(usage),
            sealed,
            env_providers,
            in_force: std::sync::RwLock::new(in_force),
            writes: tokio::sync::Mutex::new(()),
        })
    }

    /// The registry that resolves `provider/model` names, as configured now.
    pub(crate) fn registry(&self) -> Arc<ModelRegistry> {
        self.read().registry.clone()
    }

    /// Every configured provider, API keys redacted.
    pub fn list(&self) -> Vec<ConfiguredModelProvider> {
        self.read()
            .manifests
            .iter()
            .map(|(name, manifest)| ConfiguredModelProvider { name: name.clone(), manifest: manifest.redacted() })
            .collect()
    }

    /// Creates or replaces a provider, stored so it survives restarts. A redacted API key
    /// keeps the stored one.
    pub async fn write(
        &self,
        mut manifest: ModelProviderManifest,
        mode: ProviderWrite,
    ) -> Result<ConfiguredModelProvider> {
        validate_manifest(&manifest).map_err(|message| ServiceError::invalid_param("manifest", message))?;
        let name = manifest.provider_name().to_owned();
        // One writer at a time, so the store and the registry agree on the last write.
        let _writing = self.writes.lock().await;
        let existing = self.read().manifests.get(&name).cloned();
        if mode == ProviderWrite::Create && existing.is_some() {
            return Err(ServiceError::Conflict {
                code: "already_exists",
                message: format!("a model provider named {name:?} already exists"),
            });
        }
        if let Some(auth) = &mut manifest.auth
            && auth.api_key == REDACTED
        {
            // A stored key stays with the endpoint it was given for.
            let same_destination = |stored: &ModelProviderManifest| {
                stored.kind == manifest.kind && stored.base_url == manifest.base_url
            };
            match existing.as_ref().filter(|existing| same_destination(existing)).and_then(|existing| existing.auth.as_ref()) {
                Some(stored) => auth.api_key = stored.api_key.clone(),
                None if existing.as_ref().is_some_and(|existing| !same_destination(existing)) => {
                    return Err(ServiceError::invalid_param(
                        "manifest.auth.api_key",
                        "the API key is redacted, but the provider's type or base_url changed: a stored key is never sent \
                         to another endpoint; send the real key",
                    ));
                }
                None => {
                    return Err(ServiceError::invalid_param(
                        "manifest.auth.api_key",
                        "the API key is redacted and there is no stored key to keep; send the real key",
                    ));
                }
            }
        }
        self.sealed.put(self.settings.as_ref(), SETTING_KIND, &name, &manifest).await?;
        let mut providers = self.in_force.write().unwrap_or_else(|p| p.into_inner());
        let mut manifests = providers.manifests.clone();
        manifests.insert(name.clone(), manifest.clone());
        *providers = Providers::from_manifests(manifests, providers.http.clone(), providers.options);
        Ok(ConfiguredModelProvider { name, manifest: manifest.redacted() })
    }

    /// Deletes a provider stored through the settings API. A provider the environment stands
    /// for (`OPENAI_API_KEY`, ...) cannot be deleted here; when a stored one overrode it, the
    /// environment's comes back. Agents that name the provider's models fail their next turn
    /// with an error that names the provider (and, at save time, are refused).
    pub async fn delete(&self, name: &str) -> Result<()> {
        let _writing = self.writes.lock().await;
        if !self.settings.delete_setting(SETTING_KIND, name).await? {
            return Err(self.not_stored(name));
        }
        self.rebuild_providers().await
    }

    /// Renames a `custom` provider stored through the settings API (a well-known provider is
    /// named by its type). Agents that name the old name must be changed to the new one.
    pub async fn rename(&self, name: &str, new_name: &str) -> Result<ConfiguredModelProvider> {
        let _writing = self.writes.lock().await;
        let Some(stored) = self.sealed.get::<ModelProviderManifest>(self.settings.as_ref(), SETTING_KIND, name).await? else {
            return Err(self.not_stored(name));
        };
        if stored.kind != "custom" {
            return Err(ServiceError::invalid_param(
                "name",
                format!("the {name:?} provider is named by its type; only custom providers have a name of their own to change"),
            ));
        }
        let mut renamed = stored;
        renamed.name = Some(new_name.to_owned());
        validate_manifest(&renamed).map_err(|message| ServiceError::invalid_param("name", message))?;
        if new_name != name && self.read().manifests.contains_key(new_name) {
            return Err(ServiceError::Conflict {
                code: "already_exists",
                message: format!("a model provider named {new_name:?} already exists"),
            });
        }
        self.sealed.put(self.settings.as_ref(), SETTING_KIND, new_name, &renamed).await?;
        if new_name != name {
            self.settings.delete_setting(SETTING_KIND, name).await?;
        }
        self.rebuild_providers().await?;
        Ok(ConfiguredModelProvider { name: new_name.to_owned(), manifest: renamed.redacted() })
    }

    /// Why a provider cannot be deleted or renamed: it is not stored (404), or only the
    /// environment stands for it (409).
    fn not_stored(&self, name: &str) -> ServiceError {
        if self.env_providers.iter().any(|manifest| manifest.provider_name() == name) {
            ServiceError::Conflict {
                code: "configured_by_environment",
                message: format!(
                    "the model provider {name:?} comes from the server's environment (its API key variable); unset the \
                     variable and restart the server to remove it"
                ),
            }
        } else {
            ServiceError::NotFound(format!("no model provider named {name:?} is configured in the settings"))
        }
    }

    /// Rebuilds the providers in force from the store and the environment. The caller holds
    /// `writes`.
    async fn rebuild_providers(&self) -> Result<()> {
        let manifests = Providers::manifests(self.settings.as_ref(), &self.sealed, &self.env_providers).await?;
        let mut providers = self.in_force.write().unwrap_or_else(|p| p.into_inner());
        *providers = Providers::from_manifests(manifests, providers.http.clone(), providers.options);
        Ok(())
    }

    /// Reads the providers from the store again (another replica changed them), and rebuilds
    /// the registry if they differ from those in force.
    pub(crate) async fn reload(&self) -> Result<()> {
        // Not between a write's store update and its registry update.
        let _writing = self.writes.lock().await;
        let manifests = Providers::manifests(self.settings.as_ref(), &self.sealed, &self.env_providers).await?;
        let mut providers = self.in_force.write().unwrap_or_else(|p| p.into_inner());
        if providers.manifests != manifests {
            tracing::debug!("model providers changed on another replica; reloaded");
            *providers = Providers::from_manifests(manifests, providers.http.clone(), providers.options);
        }
        Ok(())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Providers> {
        self.in_force.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Every model agents can name, as `(provider/model, provider, manifest model)`.
    pub fn models(&self) -> Vec<(String, String, teamster_protocol::settings::ConfiguredModel)> {
        let providers = self.read();
        let mut models: Vec<_> = providers
            .manifests
            .iter()
            .flat_map(|(name, manifest)| {
                manifest.models.iter().map(move |model| (format!("{name}/{}", model.name), name.clone(), model.clone()))
            })
            .collect();
        models.push((
            format!("{}/{}", teamster_llm::providers::offline::OFFLINE_PROVIDER, teamster_llm::providers::offline::OFFLINE_MODEL),
            teamster_llm::providers::offline::OFFLINE_PROVIDER.to_owned(),
            teamster_protocol::settings::ConfiguredModel {
                name: teamster_llm::providers::offline::OFFLINE_MODEL.to_owned(),
                model_id: teamster_llm::providers::offline::OFFLINE_MODEL.to_owned(),
                properties: Default::default(),
            },
        ));
        models
    }

    /// Every model agents can name, as `tenant` sees it: with its display name, whether it has
    /// an API key and where the key comes from, and how often the tenant used it.
    pub async fn available(&self, tenant: &str) -> Result<Vec<AvailableModel>> {
        let uses = self.uses.of(tenant).await?;
        let models = self.models();
        let providers = self.read();
        let available = models
            .into_iter()
            .map(|(name, provider, model)| {
                let manifest = providers.manifests.get(&provider);
                let has_api_key = manifest.and_then(|manifest| manifest.auth.as_ref()).is_some_and(|auth| !auth.api_key.is_empty());
                let from_env = manifest.filter(|manifest| self.env_providers.contains(manifest));
                let needs_no_key =
                    provider == OFFLINE_PROVIDER || manifest.is_some_and(|manifest| manifest.kind == "custom" && manifest.auth.is_none());
                AvailableModel {
                    use_count: uses.get(&name).copied().unwrap_or(0),
                    display_name: model.properties.display_name.clone().unwrap_or_else(|| model.name.clone()),
                    api_key_env_var: from_env.and_then(|manifest| ModelRegistry::env_api_key_var(&manifest.kind)),
                    has_auth: has_api_key || needs_no_key,
                    has_api_key,
                    name,
                    model_id: model.model_id,
                    provider: AvailableModelProvider { name: provider },
                    properties: model.properties,
                }
            })
            .collect();
        Ok(available)
    }

    /// Counts a use of `model` by `tenant` (a session switched to it, or a turn ran on it), in
    /// memory: the store has it within a second (see `model_uses`).
    pub(crate) fn count_use(&self, tenant: &str, model: &str) {
        self.uses.count(tenant, model);
    }

    /// Stores the model uses counted and not yet stored (at shutdown).
    pub(crate) async fn flush_uses(&self) {
        self.uses.flush().await;
    }
}
