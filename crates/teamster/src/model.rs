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
///
/// // Anthropic's Messages API.
/// let claude = Model::anthropic("sk-ant-...", "claude-sonnet-4-5")?;
/// assert_eq!(claude.name(), "anthropic/claude-sonnet-4-5");
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
    /// time and offered one, so a whole agent loop runs without a provider. Nothing falls back
    /// to it: a program that wants it says so.
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
        Model::from_provider(provider_manifest(EnvKind::OpenAi, base_url, api_key, model_id)?, model_id)
    }

    /// A model of Anthropic's Messages API (`https://api.anthropic.com/v1`), by its model id
    /// (`claude-sonnet-4-5`, ...). Calls are retried on rate limits and server errors like
    /// every provider's.
    pub fn anthropic(api_key: &str, model_id: &str) -> Result<Model, Error> {
        Model::anthropic_at(ANTHROPIC_BASE_URL, api_key, model_id)
    }

    /// A model behind an endpoint that speaks Anthropic's Messages API at `base_url` (which
    /// ends before `/messages`, as in `https://api.anthropic.com/v1`).
    pub fn anthropic_at(base_url: &str, api_key: &str, model_id: &str) -> Result<Model, Error> {
        Model::from_provider(provider_manifest(EnvKind::Anthropic, base_url, api_key, model_id)?, model_id)
    }

    /// The model `model_id` of the provider the environment names, read through `vars`
    /// (`|name| std::env::var(name).ok()`): OpenAI's (or the OpenAI-compatible endpoint of
    /// `OPENAI_BASE_URL`) when `OPENAI_API_KEY` is set, Anthropic's (or `ANTHROPIC_BASE_URL`)
    /// when `ANTHROPIC_API_KEY` is; with both, a `claude-` model id picks Anthropic. Without
    /// either key it is [`Error::MissingApiKey`], never a silent stand-in: call
    /// [`Model::offline`] to run without a provider.
    ///
    /// ```
    /// use teamster::{Error, Model};
    ///
    /// let missing = Model::from_env_vars(|_| None, "gpt-4o-mini").unwrap_err();
    /// assert!(matches!(missing, Error::MissingApiKey { .. }));
    ///
    /// let vars = |name: &str| (name == "ANTHROPIC_API_KEY").then(|| "sk-ant-test".to_owned());
    /// assert_eq!(Model::from_env_vars(vars, "claude-sonnet-4-5")?.name(), "anthropic/claude-sonnet-4-5");
    /// # Ok::<(), teamster::Error>(())
    /// ```
    pub fn from_env_vars(vars: impl Fn(&str) -> Option<String>, model_id: &str) -> Result<Model, Error> {
        Model::from_provider(env_provider(vars, model_id)?, model_id)
    }

    /// A model behind your own client (any [`ModelClient`]), called with `model_id`.
    pub fn from_client(client: impl ModelClient + 'static, model_id: &str) -> Model {
        Model { name: format!("custom/{model_id}"), resolved: resolved(Arc::new(client), model_id, "custom") }
    }

    /// The one model of a provider made by [`provider_manifest`].
    fn from_provider(provider: ModelProviderManifest, model_id: &str) -> Result<Model, Error> {
        let name = format!("{}/{model_id}", provider.kind);
        let registry = ModelRegistry::new([provider], reqwest::Client::new());
        let resolved = registry
            .resolve(&name)
            .map_err(|error| Error::Model { model: name.clone(), reason: error.to_string() })?;
        Ok(Model { name, resolved })
    }

    /// The model's name, `provider/model`.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn resolved(&self) -> &ResolvedModel {
        &self.resolved
    }
}

/// Where Anthropic's Messages API is.
const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";

/// The kinds of provider a key in the environment stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EnvKind {
    OpenAi,
    Anthropic,
}

impl EnvKind {
    /// The provider's kind in a manifest, which is also its name here.
    fn kind(self) -> &'static str {
        match self {
            EnvKind::OpenAi => "openai",
            EnvKind::Anthropic => "anthropic",
        }
    }
}

/// The provider of the environment's key (see [`Model::from_env_vars`]) with the one model
/// `model_id`; [`Error::MissingApiKey`] without a key.
pub(crate) fn env_provider(vars: impl Fn(&str) -> Option<String>, model_id: &str) -> Result<ModelProviderManifest, Error> {
    let variable = |name: &str| vars(name).map(|value| value.trim().to_owned()).filter(|value| !value.is_empty());
    let openai = variable("OPENAI_API_KEY").map(|key| {
        (EnvKind::OpenAi, variable("OPENAI_BASE_URL").unwrap_or_else(|| "https://api.openai.com/v1".to_owned()), key)
    });
    let anthropic = variable("ANTHROPIC_API_KEY")
        .map(|key| (EnvKind::Anthropic, variable("ANTHROPIC_BASE_URL").unwrap_or_else(|| ANTHROPIC_BASE_URL.to_owned()), key));
    let chosen = match (openai, anthropic) {
        (Some(_), Some(anthropic)) if model_id.starts_with("claude") => anthropic,
        (Some(openai), _) => openai,
        (None, Some(anthropic)) => anthropic,
        (None, None) => {
            return Err(Error::MissingApiKey { variables: vec!["OPENAI_API_KEY".to_owned(), "ANTHROPIC_API_KEY".to_owned()] });
        }
    };
    let (kind, base_url, key) = chosen;
    provider_manifest(kind, &base_url, &key, model_id)
}

/// A provider of `kind` (named after it) with the one model `model_id`, checked.
fn provider_manifest(kind: EnvKind, base_url: &str, api_key: &str, model_id: &str) -> Result<ModelProviderManifest, Error> {
    let manifest = serde_json::json!({
        "type": kind.kind(), "name": kind.kind(), "base_url": base_url, "auth": {"api_key": api_key},
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
