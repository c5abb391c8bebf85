//! [`Model`]: the language model an agent talks to.

use std::sync::Arc;

use teamster_llm::ModelClient;
use teamster_llm::providers::offline::{OFFLINE_MODEL, OFFLINE_PROVIDER, OfflineModel};
use teamster_llm::registry::{ModelRegistry, ResolvedModel};
use teamster_protocol::settings::ModelProviderManifest;

use crate::Error;

/// A language model, ready to call: a client and the provider's model id. Cloning is cheap.
///
/// ```
/// use teamster::Model;
///
/// // The offline demo model: no network, no key; it echoes and says what it is.
/// let demo = Model::offline();
/// assert_eq!(demo.name(), "offline/echo");
///
/// // Any OpenAI-compatible endpoint.
/// let local = Model::openai_compatible("http://127.0.0.1:11434/v1", "unused", "llama3.2")?;
/// assert_eq!(local.name(), "openai/llama3.2");
/// # Ok::<(), teamster::Error>(())
/// ```
#[derive(Clone)]
pub struct Model {
    name: String,
    resolved: ResolvedModel,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Model").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Model {
    /// Teamster's offline demo model (`offline/echo`): deterministic and instant. It echoes
    /// the last user message, and calls a tool named `get_current_datetime` when asked for the
    /// time and offered one, so a whole agent loop runs without a provider.
    pub fn offline() -> Model {
        Model {
            name: format!("{OFFLINE_PROVIDER}/{OFFLINE_MODEL}"),
            resolved: resolved(Arc::new(OfflineModel), OFFLINE_MODEL, OFFLINE_PROVIDER),
        }
    }

    /// A model behind an OpenAI-compatible chat completions endpoint (`base_url` ends before
    /// `/chat/completions`, as in `https://api.openai.com/v1`). Calls are retried on rate limits
    /// and server errors like every provider's.
    pub fn openai_compatible(base_url: &str, api_key: &str, model_id: &str) -> Result<Model, Error> {
        let registry = ModelRegistry::new([openai_provider(base_url, api_key, model_id)?], reqwest::Client::new());
        Model::from_registry(&registry, &format!("{OPENAI_PROVIDER}/{model_id}"))
    }

    /// The model `model_id` of the OpenAI-compatible endpoint the environment names, read
    /// through `vars` (`|name| std::env::var(name).ok()`): `OPENAI_API_KEY`, and
    /// `OPENAI_BASE_URL` for another endpoint than OpenAI's. The offline demo model when
    /// `OPENAI_API_KEY` is unset or empty: what the examples use.
    ///
    /// ```
    /// let model = teamster::Model::from_env_vars_or_offline(|_| None, "gpt-4o-mini")?;
    /// assert_eq!(model.name(), "offline/echo");
    /// # Ok::<(), teamster::Error>(())
    /// ```
    pub fn from_env_vars_or_offline(vars: impl Fn(&str) -> Option<String>, model_id: &str) -> Result<Model, Error> {
        match env_endpoint(vars) {
            Some((base_url, key)) => Model::openai_compatible(&base_url, &key, model_id),
            None => Ok(Model::offline()),
        }
    }

    /// A model behind your own client (any [`ModelClient`]), called with `model_id`.
    pub fn from_client(client: impl ModelClient + 'static, model_id: &str) -> Model {
        Model { name: format!("custom/{model_id}"), resolved: resolved(Arc::new(client), model_id, "custom") }
    }

    fn from_registry(registry: &ModelRegistry, name: &str) -> Result<Model, Error> {
        let resolved = registry
            .resolve(name)
            .map_err(|error| Error::Model { model: name.to_owned(), reason: error.to_string() })?;
        Ok(Model { name: name.to_owned(), resolved })
    }

    /// The model's name, `provider/model`.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn resolved(&self) -> &ResolvedModel {
        &self.resolved
    }
}

/// The name of the provider [`Model::openai_compatible`] and the environment's endpoint make.
pub(crate) const OPENAI_PROVIDER: &str = "openai";

/// The OpenAI-compatible endpoint `vars` name, as its base URL and key: `OPENAI_API_KEY`, and
/// `OPENAI_BASE_URL` for another endpoint than OpenAI's; `None` when the key is unset or empty.
pub(crate) fn env_endpoint(vars: impl Fn(&str) -> Option<String>) -> Option<(String, String)> {
    let variable = |name: &str| vars(name).map(|value| value.trim().to_owned()).filter(|value| !value.is_empty());
    let key = variable("OPENAI_API_KEY")?;
    Some((variable("OPENAI_BASE_URL").unwrap_or_else(|| "https://api.openai.com/v1".to_owned()), key))
}

/// The provider [`OPENAI_PROVIDER`] of an OpenAI-compatible endpoint with the one model
/// `model_id`, checked.
pub(crate) fn openai_provider(base_url: &str, api_key: &str, model_id: &str) -> Result<ModelProviderManifest, Error> {
    let manifest = serde_json::json!({
        "type": "openai", "name": OPENAI_PROVIDER, "base_url": base_url, "auth": {"api_key": api_key},
        "models": [{"name": model_id, "model_id": model_id}],
    });
    let invalid = |reason: String| Error::Model { model: model_id.to_owned(), reason };
    let manifest = serde_json::from_value(manifest).map_err(|error| invalid(error.to_string()))?;
    teamster_llm::registry::validate_manifest(&manifest).map_err(invalid)?;
    Ok(manifest)
}

/// A model outside any registry: no prices, no known context window.
fn resolved(client: Arc<dyn ModelClient>, model_id: &str, provider: &str) -> ResolvedModel {
    ResolvedModel {
        client,
        model_id: model_id.to_owned(),
        provider: provider.to_owned(),
        pricing: None,
        context_length: None,
    }
}
