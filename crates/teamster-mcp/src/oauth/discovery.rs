//! Finding an MCP server's authorization server: the `WWW-Authenticate` challenge of a 401,
//! the protected resource metadata (RFC 9728) and the authorization server metadata (RFC 8414,
//! or OpenID Connect discovery), in the order the MCP authorization spec gives.

use serde::{Deserialize, Serialize};
use url::Url;

use super::OAuthError;
use super::fetch::{self, checked_url, decode};

const RESOURCE_METADATA: &str = "protected resource metadata";
const SERVER_METADATA: &str = "authorization server metadata";

/// The most authorization servers of one resource tried, in their listed order.
const MAX_AUTHORIZATION_SERVERS: usize = 4;

/// What an MCP server's 401 says in its `Bearer` challenge (RFC 6750, RFC 9728).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Challenge {
    /// The URL of the protected resource metadata.
    pub resource_metadata: Option<String>,
    /// The scope the server needs.
    pub scope: Option<String>,
    /// The error code, e.g. `invalid_token` or `insufficient_scope`.
    pub error: Option<String>,
    /// The error's description.
    pub error_description: Option<String>,
}

impl Challenge {
    /// Reads the parameters of the `Bearer` challenge in a `WWW-Authenticate` value, which may
    /// hold several challenges. Anything unreadable is skipped.
    pub fn parse(www_authenticate: &str) -> Challenge {
        let mut challenge = Challenge::default();
        for (scheme, name, value) in auth_params(www_authenticate) {
            if !scheme.eq_ignore_ascii_case("bearer") {
                continue;
            }
            let slot = match name.to_ascii_lowercase().as_str() {
                "resource_metadata" => &mut challenge.resource_metadata,
                "scope" => &mut challenge.scope,
                "error" => &mut challenge.error,
                "error_description" => &mut challenge.error_description,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        challenge
    }
}

/// The parts of an RFC 9728 document the flow uses, under its field names; other fields are
/// ignored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtectedResourceMetadata {
    /// The resource identifier: the MCP server's URL or a prefix of it.
    pub resource: String,
    /// The issuers of the authorization servers that issue tokens for it.
    #[serde(default)]
    pub authorization_servers: Option<Vec<String>>,
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
}

/// The parts of an RFC 8414 (or OpenID Connect discovery) document the flow uses, under its
/// field names; other fields are ignored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthorizationServerMetadata {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    #[serde(default)]
    pub registration_endpoint: Option<String>,
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// Whether authorization responses carry `iss` (RFC 9207), which is then checked.
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: Option<bool>,
}

/// Everything discovery learned about one MCP server; serializable, so it can be kept and the
/// flow resumed without discovering again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discovery {
    /// The resource indicator (RFC 8707) sent with every authorization and token request: the
    /// resource of the protected resource metadata, or the MCP server's URL without it.
    pub resource: String,
    /// The protected resource metadata; `None` for a server that publishes none (the
    /// 2025-03-26 revision), whose own origin is then taken as its authorization server.
    pub resource_metadata: Option<ProtectedResourceMetadata>,
    pub authorization_server: AuthorizationServerMetadata,
    /// The scope to ask for: the challenge's, else all the resource supports, else none.
    pub scope: Option<String>,
}

/// Discovers the authorization server of the MCP server at `mcp_url`, given the
/// `WWW-Authenticate` value of its 401 if there was one.
///
/// The protected resource metadata comes from the challenge's `resource_metadata`, else from
/// `/.well-known/oauth-protected-resource` with the server's path, then without it. The first of
/// its authorization servers (at most four are tried) that publishes valid metadata is used; if
/// the server publishes no resource metadata, its origin is taken as the authorization server.
pub async fn discover(mcp_url: &str, www_authenticate: Option<&str>) -> Result<Discovery, OAuthError> {
    let mut mcp = checked_url(mcp_url)?;
    mcp.set_query(None);
    let challenge = www_authenticate.map(Challenge::parse).unwrap_or_default();

    let resource_metadata = resource_metadata(&mcp, challenge.resource_metadata.as_deref()).await?;
    let (resource, issuers) = match &resource_metadata {
        Some((url, metadata)) => {
            let issuers = metadata.authorization_servers.clone().unwrap_or_default();
            if issuers.is_empty() {
                return Err(invalid(RESOURCE_METADATA, url, "it names no authorization server".to_owned()));
            }
            (metadata.resource.clone(), issuers)
        }
        None => (mcp.to_string(), vec![mcp.origin().ascii_serialization()]),
    };

    let mut first_error = None;
    let mut authorization_server = None;
    for issuer in issuers.iter().take(MAX_AUTHORIZATION_SERVERS) {
        match server_metadata(issuer).await {
            Ok(metadata) => {
                authorization_server = Some(metadata);
                break;
            }
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    let Some(authorization_server) = authorization_server else {
        return Err(
            first_error.unwrap_or(OAuthError::MetadataNotFound { document: SERVER_METADATA, tried: issuers })
        );
    };

    let scope = challenge.scope.filter(|scope| !scope.trim().is_empty()).or_else(|| {
        let (_, metadata) = resource_metadata.as_ref()?;
        let scopes = metadata.scopes_supported.as_ref().filter(|scopes| !scopes.is_empty())?;
        Some(scopes.join(" "))
    });
    Ok(Discovery {
        resource,
        resource_metadata: resource_metadata.map(|(_, metadata)| metadata),
        authorization_server,
        scope,
    })
}

/// Finds and checks the protected resource metadata; `None` when the server publishes none.
async fn resource_metadata(
    mcp: &Url,
    from_challenge: Option<&str>,
) -> Result<Option<(Url, ProtectedResourceMetadata)>, OAuthError> {
    let mut candidates = Vec::new();
    if let Some(url) = from_challenge {
        candidates.push(checked_url(url)?);
    }
    let path = mcp.path().trim_end_matches('/');
    for suffix in [path, ""] {
        let mut url = mcp.clone();
        url.set_path(&format!("/.well-known/oauth-protected-resource{suffix}"));
        if !candidates.contains(&url) {
            candidates.push(url);
        }
    }
    let mut undecodable = None;
    for url in candidates {
        let answer = fetch::get(&url).await?;
        if !answer.status.is_success() {
            continue;
        }
        // A page that is not metadata (e.g. a web app answering every path) is passed over.
        let metadata: ProtectedResourceMetadata = match decode(&answer, true) {
            Ok(metadata) => metadata,
            Err(error) => {
                undecodable.get_or_insert(error);
                continue;
            }
        };
        let resource = Url::parse(&metadata.resource)
            .map_err(|_| invalid(RESOURCE_METADATA, &url, "its resource is not a URL".to_owned()))?;
        if !covers(&resource, mcp) {
            let reason =
                format!("its resource {} is not the MCP server {mcp}", fetch::clean(&metadata.resource));
            return Err(invalid(RESOURCE_METADATA, &url, reason));
        }
        return Ok(Some((url, metadata)));
    }
    undecodable.map_or(Ok(None), Err)
}

/// Finds and checks an authorization server's metadata, trying RFC 8414's and OpenID
/// Connect's well-known locations in the MCP spec's order.
async fn server_metadata(issuer: &str) -> Result<AuthorizationServerMetadata, OAuthError> {
    let issuer_url = checked_url(issuer)?;
    if issuer_url.query().is_some() {
        return Err(OAuthError::InvalidUrl { url: issuer.to_owned(), reason: "an issuer has no query" });
    }
    let path = issuer_url.path().trim_end_matches('/');
    let with_path = |prefix: &str| {
        let mut url = issuer_url.clone();
        url.set_path(&format!("{prefix}{path}"));
        url
    };
    let mut candidates = vec![
        with_path("/.well-known/oauth-authorization-server"),
        with_path("/.well-known/openid-configuration"),
    ];
    if !path.is_empty() {
        let mut appended = issuer_url.clone();
        appended.set_path(&format!("{path}/.well-known/openid-configuration"));
        candidates.push(appended);
    }
    let (mut tried, mut undecodable) = (Vec::new(), None);
    for url in candidates {
        let answer = fetch::get(&url).await?;
        tried.push(url.to_string());
        if !answer.status.is_success() {
            continue;
        }
        let metadata: AuthorizationServerMetadata = match decode(&answer, true) {
            Ok(metadata) => metadata,
            Err(error) => {
                undecodable.get_or_insert(error);
                continue;
            }
        };
        check_server_metadata(&metadata, issuer).map_err(|reason| invalid(SERVER_METADATA, &url, reason))?;
        return Ok(metadata);
    }
    Err(undecodable.unwrap_or(OAuthError::MetadataNotFound { document: SERVER_METADATA, tried }))
}

/// The checks RFC 8414 and the MCP spec ask for: the issuer is the one asked for, the
/// endpoints pass the URL policy, and PKCE with `S256` is offered.
fn check_server_metadata(metadata: &AuthorizationServerMetadata, issuer: &str) -> Result<(), String> {
    if metadata.issuer.trim_end_matches('/') != issuer.trim_end_matches('/') {
        return Err(format!("its issuer {:?} is not {issuer:?}", fetch::clean(&metadata.issuer)));
    }
    let endpoints = [
        Some(&metadata.authorization_endpoint),
        Some(&metadata.token_endpoint),
        metadata.registration_endpoint.as_ref(),
    ];
    for endpoint in endpoints.into_iter().flatten() {
        checked_url(endpoint).map_err(|error| error.to_string())?;
    }
    let offers_s256 = metadata
        .code_challenge_methods_supported
        .as_ref()
        .is_some_and(|methods| methods.iter().any(|method| method == "S256"));
    if !offers_s256 {
        return Err("it does not offer PKCE with S256 (code_challenge_methods_supported)".to_owned());
    }
    Ok(())
}

/// Whether a resource identifier covers the MCP server's URL: same origin, and a path that is
/// the server's or a parent of it.
fn covers(resource: &Url, mcp: &Url) -> bool {
    let prefix = resource.path().trim_end_matches('/');
    let path = mcp.path().trim_end_matches('/');
    resource.origin() == mcp.origin()
        && (path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('/')))
}

fn invalid(document: &'static str, url: &Url, reason: String) -> OAuthError {
    OAuthError::InvalidMetadata { document, url: url.to_string(), reason }
}

/// The `(scheme, name, value)` of every auth-param in a `WWW-Authenticate` value (RFC 9110
/// section 11.6.1), with quoted strings unescaped. A token68 is skipped.
fn auth_params(header: &str) -> Vec<(String, String, String)> {
    let mut params = Vec::new();
    let mut scheme = String::new();
    let mut rest = header;
    loop {
        rest = rest.trim_start_matches(|character: char| character == ',' || character.is_ascii_whitespace());
        if rest.is_empty() {
            return params;
        }
        let end = rest
            .find(|character: char| character == ',' || character == '=' || character.is_ascii_whitespace())
            .unwrap_or(rest.len());
        let (token, after) = rest.split_at(end);
        let after_spaces = after.trim_start_matches([' ', '\t']);
        if token.is_empty() {
            // A stray '=' (e.g. token68 padding): skip it.
            rest = &after_spaces[after_spaces.len().min(1)..];
            continue;
        }
        if let Some(value_start) = after_spaces.strip_prefix('=') {
            let value_start = value_start.trim_start_matches([' ', '\t']);
            let (value, remainder) = param_value(value_start);
            params.push((scheme.clone(), token.to_owned(), value));
            rest = remainder;
        } else {
            scheme = token.to_owned();
            rest = after;
        }
    }
}

/// Reads a token or a quoted string; answers the value and what follows it.
fn param_value(text: &str) -> (String, &str) {
    let Some(quoted) = text.strip_prefix('"') else {
        let end = text
            .find(|character: char| character == ',' || character.is_ascii_whitespace())
            .unwrap_or(text.len());
        return (text[..end].to_owned(), &text[end..]);
    };
    let mut value = String::new();
    let mut characters = quoted.char_indices();
    while let Some((index, character)) = characters.next() {
        match character {
            '"' => return (value, &quoted[index + 1..]),
            '\\' => {
                if let Some((_, escaped)) = characters.next() {
                    value.push(escaped);
                }
            }
            _ => value.push(character),
        }
    }
    (value, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_read_from_the_bearer_scheme() {
        let header = concat!(
            r#"Basic realm="x", Bearer error="invalid_token", error_description="Expired \"now\"", "#,
            r#"resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", "#,
            r#"scope="files:read files:write""#
        );
        assert_eq!(
            Challenge::parse(header),
            Challenge {
                resource_metadata: Some(
                    "https://mcp.example.com/.well-known/oauth-protected-resource/mcp".into()
                ),
                scope: Some("files:read files:write".into()),
                error: Some("invalid_token".into()),
                error_description: Some("Expired \"now\"".into()),
            }
        );
        let unquoted = "Negotiate abc==, bearer Resource_Metadata=https://a.example/m,scope=x";
        let challenge = Challenge::parse(unquoted);
        assert_eq!(challenge.resource_metadata.as_deref(), Some("https://a.example/m"));
        assert_eq!(challenge.scope.as_deref(), Some("x"));
        assert_eq!(Challenge::parse(r#"Basic realm="x""#), Challenge::default());
        for garbage in ["", "=", "Bearer =\"", "Bearer a=\"unterminated", ",,, = = ,"] {
            let _ = Challenge::parse(garbage);
        }
    }

    #[test]
    fn a_resource_covers_its_own_paths_on_its_origin() {
        let url = |text: &str| Url::parse(text).unwrap();
        let mcp = url("https://mcp.example.com/api/mcp");
        assert!(covers(&url("https://mcp.example.com/api/mcp"), &mcp));
        assert!(covers(&url("https://mcp.example.com/api/"), &mcp));
        assert!(covers(&url("https://mcp.example.com"), &mcp));
        assert!(!covers(&url("https://mcp.example.com/ap"), &mcp));
        assert!(!covers(&url("https://mcp.example.com/api/mcp/other"), &mcp));
        assert!(!covers(&url("https://other.example.com/api/mcp"), &mcp));
        assert!(!covers(&url("http://mcp.example.com/api/mcp"), &mcp));
    }

    #[test]
    fn server_metadata_must_match_its_issuer_and_offer_s256() {
        let metadata = AuthorizationServerMetadata {
            issuer: "https://as.example.com/".into(),
            authorization_endpoint: "https://as.example.com/authorize".into(),
            token_endpoint: "https://as.example.com/token".into(),
            registration_endpoint: None,
            scopes_supported: None,
            code_challenge_methods_supported: Some(vec!["plain".into(), "S256".into()]),
            token_endpoint_auth_methods_supported: None,
            authorization_response_iss_parameter_supported: None,
        };
        assert_eq!(check_server_metadata(&metadata, "https://as.example.com"), Ok(()));
        assert!(check_server_metadata(&metadata, "https://evil.example.com").is_err());
        let plain_only = AuthorizationServerMetadata {
            code_challenge_methods_supported: Some(vec!["plain".into()]),
            ..metadata.clone()
        };
        assert!(check_server_metadata(&plain_only, "https://as.example.com").is_err());
        let insecure =
            AuthorizationServerMetadata { token_endpoint: "http://as.example.com/token".into(), ..metadata };
        assert!(check_server_metadata(&insecure, "https://as.example.com").is_err());
    }
}
