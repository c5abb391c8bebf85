//! Settings resources: model providers and MCP servers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The value that stands for a stored secret in responses. Sent back on `PUT`, it keeps the
/// stored secret.
pub const REDACTED: &str = "********";

/// A model provider and the models it serves (`ModelProviderManifest`).
///
/// Well-known types (`openai`, `anthropic`, ...) are named by their type; `custom` providers
/// (any OpenAI-compatible endpoint) carry their own `name` and a `base_url`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelProviderManifest {
    /// The provider's type: a well-known provider (`openai`, `anthropic`, ...) or `custom` (any
    /// OpenAI-compatible endpoint).
    #[serde(rename = "type")]
    pub kind: String,
    /// The provider's name, for `custom` providers (agents name its models `NAME/model`); a well-
    /// known provider is named by its type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The API's base URL; a well-known provider's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The API key; redacted in every response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<ProviderAuth>,
    /// The models agents may name, each `provider/name`.
    pub models: Vec<ConfiguredModel>,
    /// The most requests this server sends the provider at once (1 to 10,000); more wait for a
    /// free slot. Absent means the server's default (64).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::lenient::opt_u64")]
    pub max_concurrent_requests: Option<u64>,
}

/// The provider types this server knows, and the default base URL of each well-known one.
pub const PROVIDER_TYPES: &[(&str, Option<&str>)] = &[
    ("openai", Some("https://api.openai.com/v1")),
    ("anthropic", Some("https://api.anthropic.com/v1")),
    ("google-gemini", Some("https://generativelanguage.googleapis.com/v1beta/openai")),
    ("fireworks", Some("https://api.fireworks.ai/inference/v1")),
    ("zai", Some("https://api.z.ai/api/paas/v4")),
    ("moonshot", Some("https://api.moonshot.ai/v1")),
    ("together", Some("https://api.together.xyz/v1")),
    ("alibaba", Some("https://dashscope-intl.aliyuncs.com/compatible-mode/v1")),
    ("custom", None),
];

impl ModelProviderManifest {
    /// The provider's name: `name` for `custom`, the type for well-known providers.
    pub fn provider_name(&self) -> &str {
        match self.kind.as_str() {
            "custom" => self.name.as_deref().unwrap_or_default(),
            kind => kind,
        }
    }

    /// The base URL to call: the configured one or the type's default.
    pub fn effective_base_url(&self) -> Option<&str> {
        self.base_url.as_deref().or_else(|| {
            PROVIDER_TYPES.iter().find(|(kind, _)| *kind == self.kind).and_then(|(_, url)| *url)
        })
    }

    /// A copy safe to show: the API key replaced by [`REDACTED`].
    pub fn redacted(&self) -> ModelProviderManifest {
        let mut copy = self.clone();
        if let Some(auth) = &mut copy.auth {
            auth.api_key = REDACTED.to_owned();
        }
        copy
    }
}

#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProviderAuth {
    /// The provider's API key; redacted in every response, and a redacted key sent back keeps the
    /// stored one.
    pub api_key: String,
}

/// Shows the key redacted, so that no debug print of a manifest logs it.
impl std::fmt::Debug for ProviderAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderAuth").field("api_key", &REDACTED).finish()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConfiguredModel {
    /// The name agents use after `provider/`.
    pub name: String,
    /// The id sent to the provider.
    pub model_id: String,
    /// What the model can do and costs.
    #[serde(default, deserialize_with = "crate::lenient::null_as_default")]
    pub properties: ModelProperties,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelProperties {
    /// The model's context window, in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::lenient::opt_u64")]
    pub context_length: Option<u64>,
    /// The most tokens the model writes in one call.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::lenient::opt_u64")]
    pub max_output_tokens: Option<u64>,
    /// The reasoning efforts the model accepts, for pickers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_efforts: Option<Vec<String>>,
    /// What the model costs; absent when unknown, and then no cost is computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pricing: Option<ModelPricing>,
    /// A short name for model pickers; the model's name when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
}

/// A model agents can name, as `GET /api/v1/models` lists it for a caller.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AvailableModel {
    /// `provider/model`.
    pub name: String,
    /// The id sent to the provider.
    pub model_id: String,
    /// The provider serving it.
    pub provider: AvailableModelProvider,
    /// What the model can do and costs.
    pub properties: ModelProperties,
    /// A short name for pickers: `properties.display_name`, else the model's name.
    pub display_name: String,
    /// Whether its provider has an API key.
    pub has_api_key: bool,
    /// The environment variable the key comes from, when the provider is the environment's
    /// (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env_var: Option<String>,
    /// Whether it can be called as configured: its provider has a key, or needs none (the
    /// offline model, a custom endpoint configured without one).
    pub has_auth: bool,
    /// How many times the caller's tenant's sessions switched to it or ran a turn on it.
    pub use_count: u64,
}

/// The provider of an [`AvailableModel`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AvailableModelProvider {
    /// The provider's name.
    pub name: String,
}

/// The model a session's next turn runs on (`GET /api/v1/models/current`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CurrentModel {
    /// `provider/model`.
    pub name: String,
    /// What chose it: `session` (a model chosen for the session), `mode` (the session's mode's)
    /// or `agent` (the agent's own).
    pub selected_by: String,
    /// Whether it can be called as configured (see [`AvailableModel::has_auth`]); false when
    /// no provider serves it.
    pub has_auth: bool,
    /// Its catalog entry; absent when no configured provider serves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<AvailableModel>,
}

/// A model's prices in US dollars per million tokens.
///
/// The input price applies to prompt tokens that were neither read from nor written to the
/// provider's prompt cache. An absent cache price means the input price: that never assumes a
/// discount the provider may not give, so set the cache prices to get the cheaper cache reads
/// (and the dearer cache writes) most providers charge.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelPricing {
    /// US dollars per million input tokens not read from or written to the cache.
    pub input_per_million: f64,
    /// US dollars per million output tokens.
    pub output_per_million: f64,
    /// US dollars per million input tokens read from the prompt cache; the input price when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_per_million: Option<f64>,
    /// US dollars per million input tokens written to the prompt cache; the input price when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_million: Option<f64>,
}

/// A configured provider as listed: `{ name, manifest }` with the key redacted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConfiguredModelProvider {
    /// The provider's name (the part before `/` in model names).
    pub name: String,
    /// The provider, its API key redacted.
    pub manifest: ModelProviderManifest,
}

/// An MCP server configured through the settings API (`MCPServerManifest`).
///
/// `type: "remote"` is the spec's: a server at `url`, over streamable HTTP, or the legacy SSE
/// transport with the Teamster extension `transport: "sse"`. `type: "stdio"` is a Teamster
/// extension: a command this server starts (`command`, `args`, `env`), which only an operator
/// can configure, never an agent spec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpServerManifest {
    /// `remote` (a server at `url`) or `stdio` (a command this server starts).
    #[serde(rename = "type")]
    pub kind: String,
    /// The server's name, which agents use: 2-64 characters of a-z, 0-9, '.', '_' or '-'.
    pub name: String,
    /// What the server offers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where a remote server listens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Teamster extension for remote servers: `streamable-http` (the default) or `sse`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// How this server authenticates to it: static headers, or OAuth per user (`dcr`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<McpServerAuth>,
    /// Teamster extension for stdio servers: the program to start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Teamster extension for stdio servers: the program's arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// Teamster extension for stdio servers: variables set for the program, which does not
    /// inherit this server's environment. Values are redacted like header secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
}

impl McpServerManifest {
    /// The spec's type: a server reached over HTTP.
    pub const REMOTE: &'static str = "remote";
    /// The Teamster extension: a command started by this server.
    pub const STDIO: &'static str = "stdio";

    /// A copy safe to show: header values and environment values replaced by [`REDACTED`].
    pub fn redacted(&self) -> McpServerManifest {
        let mut copy = self.clone();
        if let Some(McpServerAuth::Header { headers }) = &mut copy.auth {
            headers.values_mut().for_each(|value| *value = REDACTED.to_owned());
        }
        if let Some(env) = &mut copy.env {
            env.values_mut().for_each(|value| *value = REDACTED.to_owned());
        }
        copy
    }
}

/// How this server authenticates to an MCP server (`MCPServerManifestAuth`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type")]
pub enum McpServerAuth {
    /// Static headers sent with every request; their values are secrets.
    #[serde(rename = "header")]
    Header { headers: BTreeMap<String, String> },
    /// OAuth with dynamic client registration.
    #[serde(rename = "dcr")]
    Dcr {},
}

impl McpServerAuth {
    /// The wire `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            McpServerAuth::Header { .. } => "header",
            McpServerAuth::Dcr {} => "dcr",
        }
    }
}

/// Whether an MCP server can be used as configured (`MCPAuthStatus`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpAuthStatus {
    /// `authenticated`, `auth_required` or `not_required`.
    pub status: String,
    /// Where the caller authorizes the server, when it must.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_url: Option<String>,
}

/// A configured MCP server, secrets redacted (`ConfiguredMCPServer`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConfiguredMcpServer {
    /// The server's name.
    pub name: String,
    /// The server, its secrets redacted.
    pub manifest: McpServerManifest,
    /// Whether the caller may use it now.
    pub auth_status: McpAuthStatus,
}

/// The outcome of `POST /mcp-servers/{name}/test`: whether this server could connect to the
/// MCP server and list its tools, as a turn would.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpServerTestResult {
    /// Whether the server connected and listed its tools.
    pub ok: bool,
    /// The names of the tools it listed (empty when it failed).
    pub tools: Vec<String>,
    /// How long connecting and listing took, in milliseconds.
    pub elapsed_ms: u64,
    /// Why it failed: `unreachable` (it could not be reached or answered wrongly),
    /// `auth_required` (it wants authorization, the caller's first for an OAuth server) or
    /// `invalid_config` (its configuration cannot be used here); absent when it worked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// What failed, in words; absent when it worked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An MCP server agents can name, without its configuration (`AvailableMCPServer`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AvailableMcpServer {
    /// The server's name.
    pub name: String,
    /// The server's URL; `stdio:<name>` for a stdio server.
    pub url: String,
    /// How the server authenticates, without secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<McpServerAuthPublic>,
    /// Whether the caller may use it now.
    pub auth_status: McpAuthStatus,
}

/// The kind of authentication a server uses, without secrets (`MCPServerAuthPublic`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpServerAuthPublic {
    /// `header` (static headers) or `dcr` (OAuth per user).
    #[serde(rename = "type")]
    pub kind: String,
}

/// A skill kept in a git repository (`SkillManifest`; `type` is always `git`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SkillManifest {
    /// Where the skill comes from: `git`.
    #[serde(rename = "type")]
    pub kind: SkillType,
    /// The skill's name, which agents use.
    pub name: String,
    /// Concise guidance for when the agent should use the skill.
    pub description: String,
    /// The repository: an `https://` URL (Teamster also takes `http://` and `git://`).
    pub url: String,
    /// A branch, tag or commit SHA.
    #[serde(rename = "ref")]
    pub reference: String,
    /// The skill's directory within the repository; its root when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// The kinds of skill sources (`SkillType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum SkillType {
    #[serde(rename = "git")]
    Git,
}

/// A configured skill (`ConfiguredSkill`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConfiguredSkill {
    /// The skill's name.
    pub name: String,
    /// The skill.
    pub manifest: SkillManifest,
}

/// A skill agents can name, as a chat lists it (`AvailableSkill`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AvailableSkill {
    /// The skill's name.
    pub name: String,
    /// When the agent should use the skill.
    pub description: String,
}
