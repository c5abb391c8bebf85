//! The model registry: turns `provider/model` names into a client and the provider's model id.
//!
//! A [`ModelRegistry`] is built from the configured [`ModelProviderManifest`]s plus the
//! always-present `offline` provider ([`OfflineModel`]). It makes one client per provider up
//! front, so resolving a name is a map lookup. Every provider's client except `offline` is
//! wrapped in a concurrency limit and then in retries ([`RegistryOptions`]). It never reads the
//! process environment: callers
//! that want the `OPENAI_API_KEY` convention pass a lookup function to
//! [`ModelRegistry::env_manifest`]. [`validate_manifest`] is the check the settings API runs
//! before it stores a manifest.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use teamster_protocol::agent::is_valid_resource_name;
use teamster_protocol::settings::{
    ConfiguredModel, ModelPricing, ModelProviderManifest, PROVIDER_TYPES, ProviderAuth,
};

use crate::ModelClient;
use crate::limit::{DEFAULT_MAX_CONCURRENT_REQUESTS, LimitedClient};
use crate::retry::{RetryPolicy, RetryingClient};
use crate::providers::offline::{OFFLINE_MODEL, OFFLINE_PROVIDER, OfflineModel};
use crate::providers::anthropic::AnthropicClient;
use crate::providers::openai::OpenAiClient;

/// The models the `OPENAI_API_KEY` provider offers, each under its own id.
pub const ENV_OPENAI_MODELS: &[&str] = &["gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "o3", "o4-mini"];

/// The models the `ANTHROPIC_API_KEY` provider offers, each under its own id.
pub const ENV_ANTHROPIC_MODELS: &[&str] =
    &["claude-opus-4-6", "claude-sonnet-4-6", "claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5"];

/// What to do about a provider that is not configured: for one the environment can stand for
/// (`openai`, `anthropic`), set its key variable and restart the server; for any, add it in the
/// settings.
pub fn missing_provider_hint(provider: &str) -> String {
    let settings = "add the provider in the settings (the web UI's Settings page, or PUT /api/v1/settings/model-providers)";
    match provider {
        "openai" => format!("set OPENAI_API_KEY in the server's environment and restart it, or {settings}"),
        "anthropic" => format!("set ANTHROPIC_API_KEY in the server's environment and restart it, or {settings}"),
        _ => settings.to_owned(),
    }
}

/// The most concurrent requests a provider manifest may allow.
pub const MAX_CONCURRENT_REQUESTS: u64 = 10_000;

/// A model name resolved to something that can be called.
#[derive(Clone)]
pub struct ResolvedModel {
    pub client: Arc<dyn ModelClient>,
    /// The id to put in [`crate::ModelRequest::model`].
    pub model_id: String,
    /// The provider's name (the part before `/`).
    pub provider: String,
    /// The model's prices, when configured.
    pub pricing: Option<ModelPricing>,
    /// The model's context window in tokens, when configured.
    pub context_length: Option<u64>,
}

/// How the registry wraps provider clients.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegistryOptions {
    /// How failed calls to every provider are retried.
    pub retry: RetryPolicy,
}

impl std::fmt::Debug for ResolvedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedModel").field("provider", &self.provider).field("model_id", &self.model_id).finish()
    }
}

/// Why a model name could not be resolved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("invalid model name {name:?}: expected `provider/model`, for example `offline/echo`")]
    InvalidName { name: String },
    #[error("there is no model provider named {provider:?} (configured providers: {}); {}", known.join(", "), missing_provider_hint(provider))]
    UnknownProvider { provider: String, known: Vec<String> },
    #[error("provider {provider:?} has no model {model:?}; its models: {}", known.join(", "))]
    UnknownModel { provider: String, model: String, known: Vec<String> },
    #[error("provider {provider:?} cannot be used: {reason}")]
    Unsupported { provider: String, kind: String, reason: String },
}

/// Every configured provider, by name.
#[derive(Clone)]
pub struct ModelRegistry {
    providers: BTreeMap<String, ProviderEntry>,
}

impl std::fmt::Debug for ModelRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.providers.iter().map(|(name, entry)| (name, entry.models.keys().collect::<Vec<_>>())))
            .finish()
    }
}

/// One provider: its client (or why there is none) and its models.
#[derive(Clone)]
struct ProviderEntry {
    kind: String,
    client: Result<Arc<dyn ModelClient>, String>,
    /// The models by the name agents write after `provider/`.
    models: BTreeMap<String, ConfiguredModel>,
}

impl ModelRegistry {
    /// A registry of `manifests` plus the `offline` provider. When two manifests name the same
    /// provider, the later one wins, so callers list the environment's provider before the
    /// stored settings. The name `offline` is reserved: a manifest using it is ignored.
    pub fn new(manifests: impl IntoIterator<Item = ModelProviderManifest>, http: reqwest::Client) -> Self {
        ModelRegistry::with_options(manifests, http, RegistryOptions::default())
    }

    /// Like [`ModelRegistry::new`], with provider clients wrapped as `options` say.
    pub fn with_options(
        manifests: impl IntoIterator<Item = ModelProviderManifest>,
        http: reqwest::Client,
        options: RegistryOptions,
    ) -> Self {
        let mut providers = BTreeMap::new();
        for manifest in manifests {
            let name = manifest.provider_name().to_owned();
            if name == OFFLINE_PROVIDER {
                tracing::warn!("ignoring a model provider named {OFFLINE_PROVIDER:?}: the name is reserved");
                continue;
            }
            providers.insert(name, ProviderEntry::new(&manifest, &http, options));
        }
        let offline: Arc<dyn ModelClient> = Arc::new(OfflineModel::new());
        providers.insert(
            OFFLINE_PROVIDER.to_owned(),
            ProviderEntry {
                kind: OFFLINE_PROVIDER.to_owned(),
                client: Ok(offline),
                models: BTreeMap::from([(
                    OFFLINE_MODEL.to_owned(),
                    ConfiguredModel {
                        name: OFFLINE_MODEL.to_owned(),
                        model_id: OFFLINE_MODEL.to_owned(),
                        properties: Default::default(),
                    },
                )]),
            },
        );
        ModelRegistry { providers }
    }

    /// A registry of the environment's providers (see [`ModelRegistry::env_manifest`]) plus
    /// `offline`.
    pub fn from_env_vars(vars: impl Fn(&str) -> Option<String>, http: reqwest::Client) -> Self {
        ModelRegistry::new(ModelRegistry::env_manifest(vars), http)
    }

    /// The providers the environment stands for, read through `vars` (for example
    /// `|name| std::env::var(name).ok()`): `openai` when `OPENAI_API_KEY` is set (and
    /// optionally `OPENAI_BASE_URL`), `anthropic` when `ANTHROPIC_API_KEY` is set (and optionally
    /// `ANTHROPIC_BASE_URL`). Empty keys count as unset.
    pub fn env_manifest(vars: impl Fn(&str) -> Option<String>) -> Vec<ModelProviderManifest> {
        ENV_PROVIDERS.into_iter().filter_map(|(kind, prefix, models)| env_provider(&vars, kind, prefix, models)).collect()
    }

    /// The environment variable [`ModelRegistry::env_manifest`] reads the API key of a
    /// provider type from (`OPENAI_API_KEY`), for the types it knows.
    pub fn env_api_key_var(kind: &str) -> Option<String> {
        ENV_PROVIDERS.iter().find(|(known, ..)| *known == kind).map(|(_, prefix, _)| format!("{prefix}_API_KEY"))
    }

    /// Resolves `provider/model`. The model part may itself contain `/`.
    pub fn resolve(&self, name: &str) -> Result<ResolvedModel, ResolveError> {
        let Some((provider, model)) = name.split_once('/').filter(|(p, m)| !p.is_empty() && !m.is_empty()) else {
            return Err(ResolveError::InvalidName { name: name.to_owned() });
        };
        let Some(entry) = self.providers.get(provider) else {
            return Err(ResolveError::UnknownProvider {
                provider: provider.to_owned(),
                known: self.providers.keys().cloned().collect(),
            });
        };
        let Some(configured) = entry.models.get(model) else {
            return Err(ResolveError::UnknownModel {
                provider: provider.to_owned(),
                model: model.to_owned(),
                known: entry.models.keys().cloned().collect(),
            });
        };
        match &entry.client {
            Ok(client) => Ok(ResolvedModel {
                client: client.clone(),
                model_id: configured.model_id.clone(),
                provider: provider.to_owned(),
                pricing: configured.properties.pricing,
                context_length: configured.properties.context_length,
            }),
            Err(reason) => Err(ResolveError::Unsupported {
                provider: provider.to_owned(),
                kind: entry.kind.clone(),
                reason: reason.clone(),
            }),
        }
    }

    /// Every model as `provider/model`, sorted.
    pub fn model_names(&self) -> Vec<String> {
        self.providers
            .iter()
            .flat_map(|(provider, entry)| entry.models.keys().map(move |model| format!("{provider}/{model}")))
            .collect()
    }

    /// Whether a provider of that name is configured (`offline` always is).
    pub fn has_provider(&self, provider: &str) -> bool {
        self.providers.contains_key(provider)
    }
}

impl ProviderEntry {
    fn new(manifest: &ModelProviderManifest, http: &reqwest::Client, options: RegistryOptions) -> Self {
        let models = manifest.models.iter().map(|model| (model.name.clone(), model.clone())).collect();
        let client = make_client(manifest, http).map(|client| wrap_client(client, manifest, options));
        ProviderEntry { kind: manifest.kind.clone(), client, models }
    }
}

/// A provider's client behind its concurrency limit, behind retries, so that each attempt
/// waits for a permit of its own and no permit is held while waiting to retry.
fn wrap_client(
    client: Arc<dyn ModelClient>,
    manifest: &ModelProviderManifest,
    options: RegistryOptions,
) -> Arc<dyn ModelClient> {
    let max_concurrent = manifest.max_concurrent_requests.map_or(DEFAULT_MAX_CONCURRENT_REQUESTS, |limit| {
        usize::try_from(limit.clamp(1, MAX_CONCURRENT_REQUESTS)).unwrap_or(DEFAULT_MAX_CONCURRENT_REQUESTS)
    });
    let limited = LimitedClient::new(client, max_concurrent);
    Arc::new(RetryingClient::new(limited, options.retry, manifest.provider_name()))
}

/// The provider of type `kind` that `{prefix}_API_KEY` and `{prefix}_BASE_URL` stand for, offering
/// `models` under their own ids; `None` when the key is unset or empty.
/// The provider types the environment may stand for: type, variable prefix, models.
const ENV_PROVIDERS: [(&str, &str, &[&str]); 2] =
    [("openai", "OPENAI", ENV_OPENAI_MODELS), ("anthropic", "ANTHROPIC", ENV_ANTHROPIC_MODELS)];

fn env_provider(
    vars: impl Fn(&str) -> Option<String>,
    kind: &str,
    prefix: &str,
    models: &[&str],
) -> Option<ModelProviderManifest> {
    let var = |suffix: &str| {
        vars(&format!("{prefix}_{suffix}")).map(|value| value.trim().to_owned()).filter(|value| !value.is_empty())
    };
    let api_key = var("API_KEY")?;
    Some(ModelProviderManifest {
        kind: kind.to_owned(),
        name: None,
        base_url: var("BASE_URL"),
        auth: Some(ProviderAuth { api_key }),
        models: models
            .iter()
            .map(|name| ConfiguredModel {
                name: (*name).to_owned(),
                model_id: (*name).to_owned(),
                properties: Default::default(),
            })
            .collect(),
        max_concurrent_requests: None,
    })
}

/// The client of a provider, or why it cannot have one.
fn make_client(manifest: &ModelProviderManifest, http: &reqwest::Client) -> Result<Arc<dyn ModelClient>, String> {
    let kind = manifest.kind.as_str();
    if !PROVIDER_TYPES.iter().any(|(known, _)| *known == kind) {
        return Err(format!("unknown provider type {kind:?}"));
    }
    let Some(base_url) = manifest.effective_base_url() else {
        return Err("it has no base_url".to_owned());
    };
    let api_key = manifest.auth.as_ref().map(|auth| auth.api_key.clone()).filter(|key| !key.is_empty());
    Ok(match kind {
        "anthropic" => Arc::new(AnthropicClient::new(base_url, api_key, http.clone())),
        // OpenAI rejects `top_k`; the compatible servers behind the other types accept it.
        _ => Arc::new(OpenAiClient::new(base_url, api_key, http.clone()).with_top_k(kind != "openai")),
    })
}

/// Checks a provider manifest before it is stored: a known type; for `custom`, a valid resource
/// name and a base URL; an `http(s)` base URL; at least one model; valid and unique model names
/// with model ids and finite, non-negative prices; a non-empty API key when `auth` is given; a
/// concurrency limit from 1 to [`MAX_CONCURRENT_REQUESTS`].
pub fn validate_manifest(manifest: &ModelProviderManifest) -> Result<(), String> {
    let kind = manifest.kind.as_str();
    if !PROVIDER_TYPES.iter().any(|(known, _)| *known == kind) {
        let known: Vec<&str> = PROVIDER_TYPES.iter().map(|(known, _)| *known).collect();
        return Err(format!("unknown provider type {kind:?}; known types: {}", known.join(", ")));
    }
    if kind == "custom" {
        let name = manifest.name.as_deref().unwrap_or_default();
        if !is_valid_resource_name(name) {
            return Err(format!(
                "a custom provider needs a name of 2 to 64 lowercase letters, digits, '.', '_' or '-', \
                 starting with a letter; got {name:?}"
            ));
        }
        if name == OFFLINE_PROVIDER || PROVIDER_TYPES.iter().any(|(known, _)| *known == name) {
            return Err(format!("the provider name {name:?} is reserved"));
        }
        if manifest.base_url.is_none() {
            return Err("a custom provider needs a base_url".to_owned());
        }
    }
    if let Some(base_url) = &manifest.base_url {
        validate_base_url(base_url)?;
    }
    if manifest.models.is_empty() {
        return Err("a provider needs at least one model".to_owned());
    }
    let mut names = HashSet::new();
    for model in &manifest.models {
        if !is_valid_model_name(&model.name) {
            return Err(format!(
                "invalid model name {:?}: use up to 200 letters, digits and '.', '_', '-', ':', '@', '+', '/', \
                 not starting with '/'",
                model.name
            ));
        }
        if !names.insert(model.name.as_str()) {
            return Err(format!("the model name {:?} appears twice", model.name));
        }
        if model.model_id.trim().is_empty() {
            return Err(format!("the model {:?} needs a model_id", model.name));
        }
        if let Some(pricing) = &model.properties.pricing {
            validate_pricing(pricing).map_err(|error| format!("the model {:?}: {error}", model.name))?;
        }
    }
    if let Some(limit) = manifest.max_concurrent_requests
        && !(1..=MAX_CONCURRENT_REQUESTS).contains(&limit)
    {
        return Err(format!("max_concurrent_requests must be from 1 to {MAX_CONCURRENT_REQUESTS}, got {limit}"));
    }
    if let Some(auth) = &manifest.auth
        && auth.api_key.trim().is_empty()
    {
        return Err("auth.api_key must not be empty".to_owned());
    }
    Ok(())
}

/// An absolute `http://` or `https://` URL with a host and no whitespace.
fn validate_base_url(url: &str) -> Result<(), String> {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    let host = rest.map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default());
    match host {
        Some(host) if !host.is_empty() && !url.chars().any(|c| c.is_whitespace() || c.is_control()) => Ok(()),
        _ => Err(format!("base_url must be an http:// or https:// URL, got {url:?}")),
    }
}

/// Every price finite and not negative.
fn validate_pricing(pricing: &ModelPricing) -> Result<(), String> {
    let prices = [
        ("input_per_million", Some(pricing.input_per_million)),
        ("output_per_million", Some(pricing.output_per_million)),
        ("cache_read_per_million", pricing.cache_read_per_million),
        ("cache_write_per_million", pricing.cache_write_per_million),
    ];
    for (field, price) in prices {
        if let Some(price) = price
            && !(price.is_finite() && price >= 0.0)
        {
            return Err(format!("pricing.{field} must be a finite number of dollars, not negative; got {price}"));
        }
    }
    Ok(())
}

fn is_valid_model_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('/')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '@' | '+' | '/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str, model_id: &str) -> ConfiguredModel {
        ConfiguredModel { name: name.into(), model_id: model_id.into(), properties: Default::default() }
    }

    fn custom(name: &str, base_url: Option<&str>, models: Vec<ConfiguredModel>) -> ModelProviderManifest {
        ModelProviderManifest {
            kind: "custom".into(),
            name: Some(name.into()),
            base_url: base_url.map(Into::into),
            auth: None,
            models,
            max_concurrent_requests: None,
        }
    }

    fn registry(manifests: Vec<ModelProviderManifest>) -> ModelRegistry {
        ModelRegistry::new(manifests, reqwest::Client::new())
    }

    #[test]
    fn offline_is_always_there() {
        let resolved = registry(vec![]).resolve("offline/echo").unwrap();
        assert_eq!((resolved.provider.as_str(), resolved.model_id.as_str()), ("offline", "echo"));
        assert_eq!(registry(vec![]).model_names(), ["offline/echo"]);
    }

    #[test]
    fn names_map_to_model_ids_and_errors_list_what_is_known() {
        let registry = registry(vec![custom(
            "local",
            Some("http://127.0.0.1:9/v1"),
            vec![model("fast", "meta/llama-3-8b"), model("org/big", "big-model")],
        )]);
        assert_eq!(registry.resolve("local/fast").unwrap().model_id, "meta/llama-3-8b");
        assert_eq!(registry.resolve("local/org/big").unwrap().model_id, "big-model");
        let error = registry.resolve("local/slow").unwrap_err();
        assert_eq!(
            error,
            ResolveError::UnknownModel {
                provider: "local".into(),
                model: "slow".into(),
                known: vec!["fast".into(), "org/big".into()]
            }
        );
        assert!(error.to_string().contains("fast, org/big"), "{error}");
        let error = registry.resolve("nope/x").unwrap_err();
        assert!(matches!(&error, ResolveError::UnknownProvider { known, .. } if known == &["local", "offline"]));
        assert!(error.to_string().contains("local, offline"), "{error}");
        assert!(error.to_string().contains("add the provider in the settings"), "{error}");
        let error = registry.resolve("openai/gpt-4o").unwrap_err().to_string();
        assert!(error.contains("no model provider named \"openai\"") && error.contains("set OPENAI_API_KEY") && error.contains("restart"), "{error}");
        assert!(matches!(registry.resolve("echo"), Err(ResolveError::InvalidName { .. })));
        assert!(matches!(registry.resolve("offline/"), Err(ResolveError::InvalidName { .. })));
    }

    #[test]
    fn unknown_types_are_unsupported_and_offline_is_reserved() {
        let anthropic = ModelProviderManifest {
            kind: "anthropic".into(),
            name: None,
            base_url: None,
            auth: Some(ProviderAuth { api_key: "k".into() }),
            models: vec![model("sonnet", "claude-sonnet-4-5")],
            max_concurrent_requests: None,
        };
        let mut strange = anthropic.clone();
        strange.kind = "strange".into();
        let registry = registry(vec![anthropic, strange, custom("offline", Some("http://x"), vec![model("m", "m")])]);
        assert_eq!(registry.resolve("anthropic/sonnet").unwrap().model_id, "claude-sonnet-4-5");
        let error = registry.resolve("strange/sonnet").unwrap_err();
        assert!(matches!(&error, ResolveError::Unsupported { kind, .. } if kind == "strange"), "{error}");
        assert!(registry.resolve("offline/echo").is_ok());
        assert!(registry.resolve("offline/m").is_err());
    }

    #[test]
    fn the_environment_gives_openai_and_anthropic_providers() {
        let vars = |name: &str| match name {
            "OPENAI_API_KEY" => Some("sk-test".to_owned()),
            "OPENAI_BASE_URL" => Some("http://127.0.0.1:9/v1".to_owned()),
            "ANTHROPIC_API_KEY" => Some(" sk-ant-test ".to_owned()),
            _ => None,
        };
        let manifests = ModelRegistry::env_manifest(vars);
        let [openai, anthropic] = &manifests[..] else { panic!("two providers expected: {manifests:?}") };
        assert_eq!(openai.kind, "openai");
        assert_eq!(openai.effective_base_url(), Some("http://127.0.0.1:9/v1"));
        assert_eq!(openai.auth.as_ref().unwrap().api_key, "sk-test");
        assert_eq!(anthropic.kind, "anthropic");
        assert_eq!(anthropic.effective_base_url(), Some("https://api.anthropic.com/v1"));
        assert_eq!(anthropic.auth.as_ref().unwrap().api_key, "sk-ant-test");
        for manifest in &manifests {
            assert!(validate_manifest(manifest).is_ok());
        }
        let registry = ModelRegistry::from_env_vars(vars, reqwest::Client::new());
        for name in ENV_OPENAI_MODELS {
            assert_eq!(&registry.resolve(&format!("openai/{name}")).unwrap().model_id, name);
        }
        for name in ENV_ANTHROPIC_MODELS {
            assert_eq!(&registry.resolve(&format!("anthropic/{name}")).unwrap().model_id, name);
        }
        assert!(ModelRegistry::env_manifest(|_| None).is_empty());
        assert!(ModelRegistry::env_manifest(|name| (name == "OPENAI_API_KEY").then(String::new)).is_empty());
        let only_anthropic = ModelRegistry::env_manifest(|name| match name {
            "ANTHROPIC_API_KEY" => Some("k".to_owned()),
            "ANTHROPIC_BASE_URL" => Some("http://127.0.0.1:9/anthropic/v1".to_owned()),
            _ => None,
        });
        assert_eq!(only_anthropic.len(), 1);
        assert_eq!(only_anthropic[0].effective_base_url(), Some("http://127.0.0.1:9/anthropic/v1"));
    }

    /// The request line, headers and body the client of `provider/m` sends first, with a model
    /// served at a local socket that never answers.
    async fn first_request(mut manifest: ModelProviderManifest) -> String {
        use futures_util::StreamExt;
        use tokio::io::AsyncReadExt;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        manifest.base_url = Some(format!("http://{}/v1", listener.local_addr().unwrap()));
        let name = format!("{}/m", manifest.provider_name());
        let client = registry(vec![manifest]).resolve(&name).unwrap().client;
        let request = crate::ModelRequest {
            model: "m".into(),
            messages: vec![crate::Message::user("hi")],
            params: teamster_protocol::agent::ModelParams { top_k: Some(3), ..Default::default() },
            ..Default::default()
        };
        let call = tokio::spawn(async move { client.stream(request).next().await.map(|item| item.is_ok()) });
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut received = String::new();
        let mut buffer = [0u8; 4096];
        let is_whole = |received: &str| {
            let Some((head, body)) = received.split_once("\r\n\r\n") else { return false };
            let length = head.lines().find_map(|line| line.strip_prefix("content-length: "));
            length.and_then(|length| length.parse().ok()) == Some(body.len())
        };
        while !is_whole(&received) {
            let read = socket.read(&mut buffer).await.unwrap();
            assert!(read > 0, "the client closed early");
            received.push_str(std::str::from_utf8(&buffer[..read]).unwrap());
        }
        call.abort();
        received
    }

    #[tokio::test]
    async fn each_type_gets_its_adapter_and_only_compatible_servers_get_top_k() {
        let mut anthropic = custom("x", None, vec![model("m", "claude-x")]);
        anthropic.kind = "anthropic".into();
        anthropic.name = None;
        anthropic.auth = Some(ProviderAuth { api_key: "sk-ant".into() });
        let sent = first_request(anthropic).await;
        assert!(sent.starts_with("POST /v1/messages HTTP/1.1"), "{sent}");
        assert!(sent.contains("x-api-key: sk-ant"), "{sent}");
        assert!(sent.contains(r#""top_k":3"#), "{sent}");

        let mut openai = custom("x", None, vec![model("m", "gpt-x")]);
        openai.kind = "openai".into();
        openai.name = None;
        let sent = first_request(openai).await;
        assert!(sent.starts_with("POST /v1/chat/completions HTTP/1.1"), "{sent}");
        assert!(!sent.contains("top_k"), "{sent}");

        let sent = first_request(custom("local", None, vec![model("m", "llama")])).await;
        assert!(sent.starts_with("POST /v1/chat/completions HTTP/1.1"), "{sent}");
        assert!(sent.contains(r#""top_k":3"#), "{sent}");
    }

    #[test]
    fn a_resolved_model_carries_its_prices_and_context_window() {
        let pricing = ModelPricing {
            input_per_million: 2.5,
            output_per_million: 10.0,
            cache_read_per_million: None,
            cache_write_per_million: None,
        };
        let mut priced = model("big", "big-1");
        priced.properties.pricing = Some(pricing);
        priced.properties.context_length = Some(128_000);
        let registry = registry(vec![custom("local", Some("http://127.0.0.1:9/v1"), vec![priced, model("bare", "b")])]);
        let resolved = registry.resolve("local/big").unwrap();
        assert_eq!((resolved.pricing, resolved.context_length), (Some(pricing), Some(128_000)));
        let resolved = registry.resolve("local/bare").unwrap();
        assert_eq!((resolved.pricing, resolved.context_length), (None, None));
    }

    #[test]
    fn later_manifests_replace_earlier_ones() {
        let registry = registry(vec![
            custom("local", Some("http://a"), vec![model("one", "1")]),
            custom("local", Some("http://b"), vec![model("two", "2")]),
        ]);
        assert!(registry.resolve("local/one").is_err());
        assert_eq!(registry.resolve("local/two").unwrap().model_id, "2");
    }

    #[test]
    fn validation_catches_each_mistake() {
        let good = custom("my-llm", Some("https://llm.example.com/v1"), vec![model("m", "m-1")]);
        assert_eq!(validate_manifest(&good), Ok(()));
        let check = |change: &dyn Fn(&mut ModelProviderManifest), expected: &str| {
            let mut manifest = good.clone();
            change(&mut manifest);
            let error = validate_manifest(&manifest).unwrap_err();
            assert!(error.contains(expected), "{error:?} should mention {expected:?}");
        };
        check(&|m| m.kind = "nope".into(), "unknown provider type");
        check(&|m| m.name = Some("Bad Name".into()), "needs a name");
        check(&|m| m.name = None, "needs a name");
        check(&|m| m.name = Some("offline".into()), "reserved");
        check(&|m| m.name = Some("openai".into()), "reserved");
        check(&|m| m.base_url = None, "needs a base_url");
        check(&|m| m.base_url = Some("ftp://x".into()), "http://");
        check(&|m| m.base_url = Some("https://".into()), "http://");
        check(&|m| m.models.clear(), "at least one model");
        check(&|m| m.models.push(model("m", "other")), "twice");
        check(&|m| m.models[0].name = "has space".into(), "invalid model name");
        check(&|m| m.models[0].model_id = " ".into(), "model_id");
        check(&|m| m.auth = Some(ProviderAuth { api_key: "".into() }), "api_key");
        check(&|m| m.max_concurrent_requests = Some(0), "max_concurrent_requests");
        check(&|m| m.max_concurrent_requests = Some(10_001), "max_concurrent_requests");
        let priced = |change: &dyn Fn(&mut ModelPricing)| {
            let mut pricing = ModelPricing {
                input_per_million: 3.0,
                output_per_million: 15.0,
                cache_read_per_million: Some(0.3),
                cache_write_per_million: None,
            };
            change(&mut pricing);
            move |m: &mut ModelProviderManifest| m.models[0].properties.pricing = Some(pricing)
        };
        check(&priced(&|p| p.input_per_million = -1.0), "pricing.input_per_million");
        check(&priced(&|p| p.output_per_million = f64::INFINITY), "pricing.output_per_million");
        check(&priced(&|p| p.cache_read_per_million = Some(f64::NAN)), "pricing.cache_read_per_million");
        check(&priced(&|p| p.cache_write_per_million = Some(-0.5)), "pricing.cache_write_per_million");
        let mut limited_and_priced = good.clone();
        limited_and_priced.max_concurrent_requests = Some(10_000);
        priced(&|_| {})(&mut limited_and_priced);
        assert_eq!(validate_manifest(&limited_and_priced), Ok(()));
        let openai = ModelProviderManifest {
            kind: "openai".into(),
            name: None,
            base_url: None,
            auth: Some(ProviderAuth { api_key: "sk".into() }),
            models: vec![model("gpt-4o", "gpt-4o")],
            max_concurrent_requests: None,
        };
        assert_eq!(validate_manifest(&openai), Ok(()));
    }
}
