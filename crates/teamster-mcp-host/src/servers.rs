//! MCP server settings: the registry agents name servers from (`truefoundry-mcp-registry`),
//! stored as settings documents, what an agent may say about MCP servers inline, and how
//! their manifests are checked, redacted and connected to (the host's operations on them are
//! in `host.rs`).
//!
//! Header values and stdio environment values are secrets: every response shows them redacted,
//! and a redacted value sent back on a write keeps the stored one. A URL's user info and query
//! may be credentials too: only the operator sees a server's URL whole ([`sees_whole_urls`]),
//! and a message that quotes a URL loses them ([`scrub_url`]). Stdio servers run a command
//! on this machine, so only the settings API (an operator's action) can define them; an agent
//! spec or session that asks for a command is refused.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use teamster_egress::EgressPolicy;
use teamster_mcp::{HttpTransport, McpConnection, McpError, McpServerConfig, StdioTransport, Transport};
use teamster_protocol::agent::{McpServer, McpServerSource, is_valid_resource_name};
use teamster_protocol::settings::{
    ConfiguredMcpServer, McpAuthStatus, McpServerAuth, McpServerManifest, REDACTED,
};
use teamster_store::SettingsStore;
use teamster_tools::selector::Selectors;

use crate::error::{Result, McpHostError};
use teamster_sealed::SealedSettings;
use teamster_identity::Caller;

/// The settings kind under which MCP servers are stored.
pub const SETTING_KIND: &str = "mcp-server";
/// The most MCP servers one agent may use.
pub const MAX_AGENT_MCP_SERVERS: usize = 32;
/// The longest URL accepted, in bytes.
const MAX_URL_BYTES: usize = 2048;
/// The longest description accepted, in bytes.
const MAX_DESCRIPTION_BYTES: usize = 4096;
/// The most headers, arguments or environment variables of one server.
const MAX_ENTRIES: usize = 256;
/// The longest header value, argument, command or environment value, in bytes.
const MAX_VALUE_BYTES: usize = 32 * 1024;
/// How long `GET /mcp-servers/{name}/tools` may spend connecting, and then listing.
pub(crate) const LISTING_TIMEOUT: Duration = Duration::from_secs(10);

/// The configured MCP servers, by name.
#[derive(Default)]
pub(crate) struct McpRegistry {
    pub(crate) servers: RwLock<BTreeMap<String, McpServerManifest>>,
    /// Serialises writes, so the store and memory agree on the last one.
    pub(crate) writes: tokio::sync::Mutex<()>,
}

impl McpRegistry {
    /// The servers stored through the settings API; unreadable ones are logged and skipped.
    pub async fn load(store: &dyn SettingsStore, sealed: &SealedSettings) -> Result<McpRegistry> {
        let servers = sealed.list(store, SETTING_KIND).await?.into_iter().collect();
        Ok(McpRegistry { servers: RwLock::new(servers), writes: tokio::sync::Mutex::new(()) })
    }

    /// Reads the servers from the store again (another replica changed them). Not between a
    /// write's store update and its memory update.
    pub async fn reload(&self, store: &dyn SettingsStore, sealed: &SealedSettings) -> Result<()> {
        let _writing = self.writes.lock().await;
        let loaded = McpRegistry::load(store, sealed).await?.servers.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        *self.servers.write().unwrap_or_else(std::sync::PoisonError::into_inner) = loaded;
        Ok(())
    }

    /// A configured server, secrets included.
    pub fn get(&self, name: &str) -> Option<McpServerManifest> {
        self.read().get(name).cloned()
    }

    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, McpServerManifest>> {
        self.servers.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// How an MCP server write treats an existing server of the same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum McpServerWrite {
    /// `POST`: fail if the name is taken.
    Create,
    /// `PUT`: create or replace.
    Upsert,
}

/// Connects with `config`, each step bounded by [`LISTING_TIMEOUT`]; answers the connection and
/// the URL its messages must not quote whole. A failure is [`connect_error`]'s, its message scrubbed.
pub(crate) async fn connect_bounded(name: &str, mut config: McpServerConfig) -> Result<(McpConnection, Option<String>)> {
    config.connect_timeout = LISTING_TIMEOUT;
    config.call_timeout = LISTING_TIMEOUT;
    let url = endpoint_url(&config).map(str::to_owned);
    let connection = McpConnection::connect(config).await.map_err(|error| match connect_error(name, error) {
        McpHostError::Upstream(message) => McpHostError::Upstream(scrub_url(message, url.as_deref())),
        other => other,
    })?;
    Ok((connection, url))
}

/// The URL a configuration connects to, for HTTP transports.
pub(crate) fn endpoint_url(config: &McpServerConfig) -> Option<&str> {
    match &config.transport {
        Transport::StreamableHttp(http) | Transport::Sse(http) => Some(&http.url),
        Transport::Stdio(_) => None,
    }
}

/// Whether the caller sees configured servers' URLs whole, user info and query included (which
/// may hold credentials): the operator, who configures them. Everyone else sees
/// [`shown_url`]. The one place this is decided.
pub(crate) fn sees_whole_urls(caller: &Caller) -> bool {
    caller.is_operator()
}

/// A URL as shown to those who may not see its credentials: scheme, host, port and path; no
/// user info, query or fragment.
pub(crate) fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.set_query(None);
            parsed.set_fragment(None);
            parsed.into()
        }
        // Stored URLs are checked on write, so this is a URL of another kind: keep its scheme
        // and host only.
        Err(_) => {
            let before_path = url.split(['?', '#']).next().unwrap_or_default();
            let (scheme, rest) = before_path.split_once("://").unwrap_or(("", before_path));
            let authority = rest.split('/').next().unwrap_or_default();
            let host = authority.rsplit('@').next().unwrap_or_default();
            format!("{scheme}://{host}/")
        }
    }
}

/// The shortest part of a URL treated as a secret wherever it appears in a message (shorter
/// ones would blank out ordinary words).
const MIN_SCRUBBED_PART: usize = 4;

/// Removes the credentials a URL may carry (user info, query, fragment) from a message that
/// quotes it, by its parsed parts: every way a client may print the URL (as configured,
/// normalized, without its user info, without its query) becomes [`shown_url`], and whatever is
/// left of the user name, password, query or fragment (raw or percent-decoded) anywhere in the
/// message becomes `***`.
pub(crate) fn scrub_url(message: String, url: Option<&str>) -> String {
    let Some(url) = url else { return message };
    let Ok(parsed) = reqwest::Url::parse(url) else { return message };
    let user = parsed.username();
    let password = parsed.password();
    let (query, fragment) = (parsed.query(), parsed.fragment());
    if user.is_empty() && password.is_none() && query.is_none() && fragment.is_none() {
        return message;
    }
    let safe = shown_url(url);
    let mut without_userinfo = parsed.clone();
    let _ = without_userinfo.set_username("");
    let _ = without_userinfo.set_password(None);
    let mut without_query = parsed.clone();
    without_query.set_query(None);
    without_query.set_fragment(None);
    let mut printed = [url.to_owned(), parsed.to_string(), without_userinfo.to_string(), without_query.to_string()];
    printed.sort_by_key(|form| std::cmp::Reverse(form.len()));
    let mut message = message;
    for form in printed.iter().filter(|form| **form != safe) {
        message = message.replace(form.as_str(), &safe);
    }
    let parts = [Some(user), password, query, fragment];
    let mut secrets: Vec<String> = parts.into_iter().flatten().map(str::to_owned).collect();
    // Each query value alone too, raw and decoded: a message may quote one without its name.
    secrets.extend(query.into_iter().flat_map(|query| query.split('&')).filter_map(|pair| pair.split_once('=')).map(|(_, value)| value.to_owned()));
    secrets.extend(parsed.query_pairs().map(|(_, value)| value.into_owned()));
    let decoded: Vec<String> = secrets.iter().filter_map(|part| percent_decoded(part)).collect();
    secrets.extend(decoded);
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    for secret in secrets.iter().filter(|secret| secret.len() >= MIN_SCRUBBED_PART) {
        message = message.replace(secret.as_str(), "***");
    }
    message
}

/// A URL part percent-decoded (`+` as a space, as in a query), when that changes it.
fn percent_decoded(part: &str) -> Option<String> {
    let bytes = part.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = bytes.get(index + 1..index + 3).and_then(|hex| std::str::from_utf8(hex).ok());
        match (bytes[index], hex.and_then(|hex| u8::from_str_radix(hex, 16).ok())) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                index += 3;
            }
            (b'+', _) => {
                decoded.push(b' ');
                index += 1;
            }
            (byte, _) => {
                decoded.push(byte);
                index += 1;
            }
        }
    }
    let decoded = String::from_utf8_lossy(&decoded).into_owned();
    (decoded != part).then_some(decoded)
}

/// A connection failure as a request error.
pub(crate) fn connect_error(name: &str, error: McpError) -> McpHostError {
    match error {
        McpError::Unauthorized { .. } => {
            McpHostError::AuthRequired(format!("MCP server {name:?} requires authorization"))
        }
        McpError::InvalidConfig(message) => McpHostError::Unprocessable(format!("MCP server {name:?}: {message}")),
        other => McpHostError::Upstream(format!("MCP server {name:?} could not be reached: {other}")),
    }
}

pub(crate) fn not_found(name: &str) -> McpHostError {
    McpHostError::NotFound(format!("MCP server {name:?} not found"))
}

pub(crate) fn configured(name: &str, manifest: &McpServerManifest, authorized: bool) -> ConfiguredMcpServer {
    ConfiguredMcpServer {
        name: name.to_owned(),
        manifest: manifest.redacted(),
        auth_status: auth_status(manifest, authorized),
    }
}

/// Whether the server can be used as configured: no credentials needed, static headers, or
/// OAuth, which needs the user's authorization first (`authorized`: the user holds a usable
/// grant).
pub(crate) fn auth_status(manifest: &McpServerManifest, authorized: bool) -> McpAuthStatus {
    let status = match manifest.auth {
        None => "not_required",
        Some(McpServerAuth::Header { .. }) => "authenticated",
        Some(McpServerAuth::Dcr {}) if authorized => "authenticated",
        Some(McpServerAuth::Dcr {}) => "auth_required",
    };
    McpAuthStatus { status: status.to_owned(), authorization_url: None }
}

/// The stable id of a configured server, shown as `server_id` and in `mcp.initialize`.
pub(crate) fn registry_server_id(name: &str) -> String {
    format!("mcp:{name}")
}

/// The stable id of an agent's inline server.
pub(crate) fn inline_server_id(label: &str) -> String {
    format!("inline:{label}")
}

/// How to reach a configured server.
pub(crate) fn registry_config(name: &str, manifest: &McpServerManifest, allow_stdio: bool) -> Result<McpServerConfig, String> {
    let transport = match manifest.kind.as_str() {
        McpServerManifest::STDIO if !allow_stdio => return Err(stdio_disabled(name)),
        McpServerManifest::STDIO => {
            let Some(command) = manifest.command.clone() else {
                return Err(format!("MCP server {name:?} has no command"));
            };
            Transport::Stdio(StdioTransport {
                command,
                args: manifest.args.clone().unwrap_or_default(),
                env: manifest.env.clone().unwrap_or_default(),
                cwd: None,
            })
        }
        _ => {
            let Some(url) = manifest.url.clone() else {
                return Err(format!("MCP server {name:?} has no URL"));
            };
            let mut endpoint = HttpTransport::new(url);
            if let Some(McpServerAuth::Header { headers }) = &manifest.auth {
                endpoint.headers = headers.clone();
            }
            http_transport(endpoint, manifest.transport.as_deref())
        }
    };
    Ok(McpServerConfig::new(registry_server_id(name), name, transport))
}

/// Why a stdio server is neither stored nor started: stdio servers run programs on this host.
pub(crate) fn stdio_disabled(name: &str) -> String {
    format!(
        "MCP server {name:?} is of type stdio, which runs a command on this host; stdio MCP servers are disabled \
         on this server (its operator enables them with `teamster serve --allow-stdio-mcp`)"
    )
}

/// How to reach an agent's inline server: a URL a member wrote, so it may reach only what
/// `egress` allows (not this host or its private network, unless the operator says so).
pub(crate) fn inline_config(label: &str, url: &str, transport: Option<&str>, egress: &Arc<EgressPolicy>) -> McpServerConfig {
    let endpoint = HttpTransport { egress: Some(Arc::clone(egress)), ..HttpTransport::new(url) };
    McpServerConfig::new(inline_server_id(label), label, http_transport(endpoint, transport))
}

/// Streamable HTTP, or the legacy SSE transport when asked for or when the URL's path ends in
/// `/sse` and no transport is named.
fn http_transport(endpoint: HttpTransport, transport: Option<&str>) -> Transport {
    let legacy = match transport {
        Some(kind) => kind == "sse",
        None => reqwest::Url::parse(&endpoint.url).is_ok_and(|url| url.path().trim_end_matches('/').ends_with("/sse")),
    };
    if legacy { Transport::Sse(endpoint) } else { Transport::StreamableHttp(endpoint) }
}

/// Checks a settings manifest: shape, sizes, and that each kind has exactly its own fields.
pub(crate) fn validate_manifest(manifest: &McpServerManifest) -> Result<()> {
    let invalid = |param: &'static str, message: String| Err(McpHostError::invalid_param(param, message));
    if !is_valid_resource_name(&manifest.name) {
        return invalid(
            "manifest.name",
            format!(
                "MCP server name {:?} must be 2-64 characters of a-z, 0-9, '.', '_' or '-', starting with a letter and ending with a letter or digit",
                manifest.name
            ),
        );
    }
    match &manifest.description {
        Some(description) if !description.trim().is_empty() && description.len() <= MAX_DESCRIPTION_BYTES => {}
        _ => {
            return invalid(
                "manifest.description",
                format!("a description of 1 to {MAX_DESCRIPTION_BYTES} bytes is required"),
            );
        }
    }
    match manifest.kind.as_str() {
        McpServerManifest::REMOTE => {
            if manifest.command.is_some() || manifest.args.is_some() || manifest.env.is_some() {
                return invalid("manifest.command", "command, args and env are only for servers of type stdio".to_owned());
            }
            let Some(url) = &manifest.url else {
                return invalid("manifest.url", "a remote MCP server needs a url".to_owned());
            };
            check_url(url).map_err(|message| McpHostError::invalid_param("manifest.url", message))?;
            check_transport(manifest.transport.as_deref())
                .map_err(|message| McpHostError::invalid_param("manifest.transport", message))?;
            if let Some(McpServerAuth::Header { headers }) = &manifest.auth {
                check_headers(headers).map_err(|message| McpHostError::invalid_param("manifest.auth.headers", message))?;
            }
        }
        McpServerManifest::STDIO => {
            if manifest.url.is_some() || manifest.transport.is_some() || manifest.auth.is_some() {
                return invalid("manifest.url", "url, transport and auth are only for servers of type remote".to_owned());
            }
            match &manifest.command {
                Some(command) if !command.trim().is_empty() && plain(command) => {}
                _ => return invalid("manifest.command", "a stdio MCP server needs a command".to_owned()),
            }
            let args = manifest.args.as_deref().unwrap_or_default();
            if args.len() > MAX_ENTRIES || !args.iter().all(|arg| plain(arg)) {
                return invalid(
                    "manifest.args",
                    format!("at most {MAX_ENTRIES} arguments of at most {MAX_VALUE_BYTES} bytes, without NUL characters"),
                );
            }
            if let Some(env) = &manifest.env {
                check_env(env).map_err(|message| McpHostError::invalid_param("manifest.env", message))?;
            }
        }
        other => {
            return invalid("manifest.type", format!("unknown MCP server type {other:?}; use remote (or stdio)"));
        }
    }
    Ok(())
}

/// A bounded value without NUL characters.
fn plain(value: &str) -> bool {
    value.len() <= MAX_VALUE_BYTES && !value.contains('\0')
}

/// An absolute `http` or `https` URL of bounded length.
pub(crate) fn check_url(url: &str) -> Result<(), String> {
    if url.len() > MAX_URL_BYTES {
        return Err(format!("the URL is longer than {MAX_URL_BYTES} bytes"));
    }
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some() => Ok(()),
        Ok(_) => Err(format!("{url:?} is not an http or https URL")),
        Err(error) => Err(format!("{url:?} is not a valid URL: {error}")),
    }
}

/// `streamable-http`, `sse`, or absent.
pub(crate) fn check_transport(transport: Option<&str>) -> Result<(), String> {
    match transport {
        None | Some("streamable-http" | "sse") => Ok(()),
        Some(other) => Err(format!("unknown transport {other:?}; use streamable-http or sse")),
    }
}

fn check_headers(headers: &BTreeMap<String, String>) -> Result<(), String> {
    if headers.len() > MAX_ENTRIES {
        return Err(format!("at most {MAX_ENTRIES} headers are allowed"));
    }
    for (name, value) in headers {
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(format!("{name:?} is not a valid header name"));
        }
        if value.is_empty() || value.len() > MAX_VALUE_BYTES || reqwest::header::HeaderValue::from_str(value).is_err() {
            return Err(format!("the value of header {name:?} must be 1 to {MAX_VALUE_BYTES} visible characters"));
        }
    }
    Ok(())
}

fn check_env(env: &BTreeMap<String, String>) -> Result<(), String> {
    if env.len() > MAX_ENTRIES {
        return Err(format!("at most {MAX_ENTRIES} variables are allowed"));
    }
    for (name, value) in env {
        let mut chars = name.chars();
        let valid_name = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_name {
            return Err(format!("{name:?} is not a valid environment variable name"));
        }
        if !plain(value) {
            return Err(format!("the value of {name:?} must have at most {MAX_VALUE_BYTES} bytes and no NUL"));
        }
    }
    Ok(())
}

/// Replaces redacted header and environment values with the stored ones; a redacted value
/// with nothing stored is an error.
pub(crate) fn keep_redacted_secrets(manifest: &mut McpServerManifest, existing: Option<&McpServerManifest>) -> Result<()> {
    // Stored secrets stay with the destination they were given for: a write that points the
    // server elsewhere must send them again.
    let existing = existing.filter(|existing| same_destination(existing, manifest));
    if let Some(McpServerAuth::Header { headers }) = &mut manifest.auth {
        let stored = match existing.and_then(|existing| existing.auth.as_ref()) {
            Some(McpServerAuth::Header { headers }) => Some(headers),
            _ => None,
        };
        restore_redacted(headers, stored, "manifest.auth.headers", "header ")?;
    }
    if let Some(env) = &mut manifest.env {
        restore_redacted(env, existing.and_then(|existing| existing.env.as_ref()), "manifest.env", "")?;
    }
    Ok(())
}

/// Replaces each redacted value of `values` with the one `stored` under its name; a redacted
/// value with nothing stored is an error about `param` (a name shown as `{what}{name:?}`).
fn restore_redacted(
    values: &mut BTreeMap<String, String>,
    stored: Option<&BTreeMap<String, String>>,
    param: &'static str,
    what: &str,
) -> Result<()> {
    for (name, value) in values.iter_mut().filter(|(_, value)| *value == REDACTED) {
        match stored.and_then(|stored| stored.get(name)) {
            Some(secret) => value.clone_from(secret),
            None => {
                return Err(McpHostError::invalid_param(
                    param,
                    format!("the value of {what}{name:?} is redacted and there is no stored value to keep for this destination (a stored secret is dropped when the server's URL, type or command changes); send the real value"),
                ));
            }
        }
    }
    Ok(())
}

/// Whether two manifests send requests (and so secrets) to the same place: the same type, URL
/// and transport, or the same command and arguments.
fn same_destination(stored: &McpServerManifest, new: &McpServerManifest) -> bool {
    stored.kind == new.kind
        && stored.url == new.url
        && stored.transport == new.transport
        && stored.command == new.command
        && stored.args == new.args
}

/// Checks an agent's MCP servers: how many, unique names, inline URLs, selectors; a command
/// (a stdio server) is refused, since only the settings API may define one.
pub fn validate_agent_servers(servers: &[McpServer]) -> Result<()> {
    if servers.len() > MAX_AGENT_MCP_SERVERS {
        return Err(McpHostError::invalid_param(
            "mcp_servers",
            format!("an agent may use at most {MAX_AGENT_MCP_SERVERS} MCP servers"),
        ));
    }
    let mut names = std::collections::HashSet::new();
    for server in servers {
        let name = server.source.name();
        if name.is_empty() || name.len() > 64 {
            return Err(McpHostError::invalid_param("mcp_servers", "an MCP server name must have 1 to 64 characters"));
        }
        if !names.insert(name) {
            return Err(McpHostError::invalid_param(
                "mcp_servers",
                format!("the MCP server name {name:?} is used twice; give each server of an agent its own name"),
            ));
        }
        match &server.source {
            McpServerSource::Registry { .. } => {}
            McpServerSource::Inline { url, transport, .. } => {
                check_url(url)
                    .and_then(|()| check_transport(transport.as_deref()))
                    .map_err(|message| McpHostError::invalid_param("mcp_servers", format!("MCP server {name:?}: {message}")))?;
            }
            McpServerSource::Unsupported { has_command: true, .. } => {
                return Err(McpHostError::Unprocessable(format!(
                    "MCP server {name:?}: an agent cannot run a command. Stdio MCP servers run programs on the \
                     server, so only an operator can define them, through PUT /api/v1/settings/mcp-servers; \
                     reference such a server by name with type truefoundry-mcp-registry"
                )));
            }
            McpServerSource::Unsupported { kind, .. } => {
                return Err(McpHostError::invalid_param(
                    "mcp_servers",
                    format!("MCP server {name:?} has unknown type {kind:?}; use truefoundry-mcp-registry or inline"),
                ));
            }
        }
        Selectors::from_server(server).map_err(|error| {
            McpHostError::invalid_param("mcp_servers", format!("MCP server {name:?}: {error}"))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(headers: &[(&str, &str)]) -> McpServerManifest {
        serde_json::from_value(serde_json::json!({
            "type": "remote", "name": "tools", "description": "Test tools.", "url": "http://127.0.0.1:1/mcp",
            "auth": {"type": "header", "headers": headers.iter().cloned().collect::<BTreeMap<_, _>>()},
        }))
        .unwrap()
    }

    #[test]
    fn redacted_secrets_keep_the_stored_ones() {
        let stored = remote(&[("Authorization", "Bearer s3cret"), ("X-Other", "o")]);
        let shown = stored.redacted();
        assert_eq!(serde_json::to_value(&shown).unwrap()["auth"]["headers"]["Authorization"], REDACTED);

        let mut sent_back = remote(&[("Authorization", REDACTED), ("X-Other", "rotated")]);
        keep_redacted_secrets(&mut sent_back, Some(&stored)).unwrap();
        assert_eq!(sent_back, remote(&[("Authorization", "Bearer s3cret"), ("X-Other", "rotated")]));

        let mut new_header = remote(&[("X-New", REDACTED)]);
        assert!(keep_redacted_secrets(&mut new_header, Some(&stored)).is_err());
        assert!(keep_redacted_secrets(&mut remote(&[("Authorization", REDACTED)]), None).is_err());

        // Pointed elsewhere, the server gets no stored secret: it must be sent again.
        let mut moved = remote(&[("Authorization", REDACTED)]);
        moved.url = Some("https://elsewhere.example/mcp".to_owned());
        let error = keep_redacted_secrets(&mut moved, Some(&stored)).unwrap_err().to_string();
        assert!(error.contains("dropped when the server's URL"), "{error}");
        let mut moved_with_secret = remote(&[("Authorization", "Bearer new")]);
        moved_with_secret.url = Some("https://elsewhere.example/mcp".to_owned());
        keep_redacted_secrets(&mut moved_with_secret, Some(&stored)).unwrap();
    }

    #[test]
    fn manifests_are_checked_by_kind() {
        assert!(validate_manifest(&remote(&[("Authorization", "Bearer x")])).is_ok());
        let bad = |patch: serde_json::Value| {
            let mut value = serde_json::to_value(remote(&[])).unwrap();
            value.as_object_mut().unwrap().extend(patch.as_object().unwrap().clone());
            let manifest: McpServerManifest = serde_json::from_value(value).unwrap();
            validate_manifest(&manifest).unwrap_err().to_string()
        };
        assert!(bad(serde_json::json!({"url": "ftp://x/"})).contains("not an http or https URL"));
        assert!(bad(serde_json::json!({"name": "Bad Name"})).contains("must be 2-64 characters"));
        assert!(bad(serde_json::json!({"description": " "})).contains("description"));
        assert!(bad(serde_json::json!({"transport": "websocket"})).contains("unknown transport"));
        assert!(bad(serde_json::json!({"command": "rm"})).contains("only for servers of type stdio"));
        assert!(bad(serde_json::json!({"type": "local"})).contains("unknown MCP server type"));
        assert!(bad(serde_json::json!({"auth": {"type": "header", "headers": {"bad name": "v"}}})).contains("header name"));
        assert!(bad(serde_json::json!({"type": "stdio", "url": null, "auth": null})).contains("needs a command"));
        assert!(
            bad(serde_json::json!({"type": "stdio", "url": null, "auth": null, "command": "python", "env": {"1X": "v"}}))
                .contains("environment variable name")
        );
        let stdio: McpServerManifest = serde_json::from_value(serde_json::json!({
            "type": "stdio", "name": "local", "description": "d", "command": "python", "args": ["s.py"], "env": {"TOKEN": "t"}
        }))
        .unwrap();
        assert!(validate_manifest(&stdio).is_ok());
        assert_eq!(stdio.redacted().env.unwrap()["TOKEN"], REDACTED);
    }

    #[test]
    fn credentials_in_urls_are_scrubbed_from_messages() {
        let url = "https://user:pw@mcp.example.com/mcp?token=t0k";
        let message = format!("error sending request for url ({}) and {url}", reqwest::Url::parse(url).unwrap());
        assert_eq!(
            scrub_url(message, Some(url)),
            "error sending request for url (https://mcp.example.com/mcp) and https://mcp.example.com/mcp"
        );
        assert_eq!(scrub_url("plain http://h/mcp".into(), Some("http://h/mcp")), "plain http://h/mcp");

        // User info and a query together; the client printed the URL without the user info.
        let url = "http://svc:PASSWORD@mcp.internal/mcp?api_key=SECRET";
        let message = "error sending request for url (http://mcp.internal/mcp?api_key=SECRET): refused; PASSWORD".to_owned();
        let scrubbed = scrub_url(message, Some(url));
        assert!(!scrubbed.contains("SECRET") && !scrubbed.contains("PASSWORD"), "{scrubbed}");
        assert!(scrubbed.contains("(http://mcp.internal/mcp)"), "{scrubbed}");
        // Percent-encoded credentials are found decoded too.
        let scrubbed = scrub_url("token s3cr3t/x leaked".into(), Some("https://h/mcp?token=s3cr3t%2Fx"));
        assert!(!scrubbed.contains("s3cr3t"), "{scrubbed}");
    }

    #[test]
    fn shown_urls_carry_no_credentials() {
        assert_eq!(shown_url("http://svc:PASS@h:8080/mcp?api_key=SECRET#f"), "http://h:8080/mcp");
        assert_eq!(shown_url("https://h/mcp"), "https://h/mcp");
        assert!(!shown_url("weird://u:PASS@h/x?SECRET").contains("PASS"));
    }

    #[test]
    fn inline_transport_follows_the_url_unless_named() {
        let kind = |url: &str, transport: Option<&str>| match inline_config("x", url, transport, &Arc::default()).transport {
            Transport::Sse(_) => "sse",
            Transport::StreamableHttp(_) => "streamable-http",
            Transport::Stdio(_) => "stdio",
        };
        assert_eq!(kind("http://h/mcp", None), "streamable-http");
        assert_eq!(kind("http://h/sse", None), "sse");
        assert_eq!(kind("http://h/sse/", None), "sse");
        assert_eq!(kind("http://h/sse", Some("streamable-http")), "streamable-http");
        assert_eq!(kind("http://h/mcp", Some("sse")), "sse");
    }

    #[test]
    fn agents_cannot_run_commands() {
        let servers: Vec<McpServer> = serde_json::from_value(serde_json::json!([
            {"type": "inline", "name": "x", "url": "http://h/mcp", "command": "rm", "args": ["-rf", "/"]}
        ]))
        .unwrap();
        assert!(matches!(validate_agent_servers(&servers), Err(McpHostError::Unprocessable(message)) if message.contains("cannot run a command")));
        let twice: Vec<McpServer> =
            serde_json::from_value(serde_json::json!([{"name": "a"}, {"type": "inline", "name": "a", "url": "http://h/mcp"}]))
                .unwrap();
        assert!(validate_agent_servers(&twice).is_err());
        let selector: Vec<McpServer> = serde_json::from_value(serde_json::json!([{"name": "a", "enable_tools": ["@nope"]}])).unwrap();
        assert!(validate_agent_servers(&selector).unwrap_err().to_string().contains("@nope"));
    }
}
