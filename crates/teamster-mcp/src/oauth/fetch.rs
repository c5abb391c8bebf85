//! The HTTP requests of the OAuth flow: one shared client with timeouts and same-origin
//! redirects only, the URL policy (`https`, or `http` to loopback), bounded answers, and OAuth
//! error bodies read into [`OAuthError::Rejected`].

use std::sync::OnceLock;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_LENGTH, HeaderValue};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use url::{Host, Url};

use super::OAuthError;

/// The largest answer read from an OAuth endpoint (metadata, registration, tokens).
pub(crate) const MAX_RESPONSE_BYTES: usize = 256 << 10;

/// The bound on one whole request, connection included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest `error_description` kept from an authorization server, in characters.
const MAX_DESCRIPTION_CHARS: usize = 500;

/// An answer read in full: its status and at most [`MAX_RESPONSE_BYTES`] of body.
pub(crate) struct Answer {
    pub(crate) url: String,
    pub(crate) status: StatusCode,
    pub(crate) body: Vec<u8>,
}

/// Parses a URL the flow will send a request or a user to, and applies the URL policy:
/// absolute, `https` (or `http` to a loopback host), no credentials, no fragment.
pub(crate) fn checked_url(text: &str) -> Result<Url, OAuthError> {
    let invalid = |reason| OAuthError::InvalidUrl { url: shown(text), reason };
    let url = Url::parse(text).map_err(|_| invalid("not an absolute URL"))?;
    match url.scheme() {
        "https" => {}
        "http" if is_loopback(&url) => {}
        "http" => return Err(invalid("plain http is only allowed to loopback hosts")),
        _ => return Err(invalid("not an http(s) URL")),
    }
    if url.host().is_none() {
        return Err(invalid("no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("credentials in the URL"));
    }
    if url.fragment().is_some() {
        return Err(invalid("a fragment"));
    }
    Ok(url)
}

/// A URL as errors show it: without credentials, query or fragment, which may hold secrets.
fn shown(text: &str) -> String {
    match Url::parse(text) {
        Ok(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.set_fragment(None);
            url.into()
        }
        Err(_) => clean(text.split(['?', '#']).next().unwrap_or_default()),
    }
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Domain(domain)) => domain.eq_ignore_ascii_case("localhost"),
        Some(Host::Ipv4(address)) => address.is_loopback(),
        Some(Host::Ipv6(address)) => address.is_loopback(),
        None => false,
    }
}

/// The client every OAuth request shares, built once.
fn client() -> Result<reqwest::Client, OAuthError> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    if let Some(client) = CLIENT.get() {
        return Ok(client.clone());
    }
    let client = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .redirect(same_origin_redirects())
        .build()
        .map_err(|error| OAuthError::Transport {
            url: String::new(),
            message: format!("cannot build an HTTP client: {}", chain(&error)),
        })?;
    Ok(CLIENT.get_or_init(|| client).clone())
}

/// GETs a JSON document.
pub(crate) async fn get(url: &Url) -> Result<Answer, OAuthError> {
    let request = client()?.get(url.clone()).header(ACCEPT, "application/json");
    send(url, request).await
}

/// POSTs a JSON body (dynamic client registration).
pub(crate) async fn post_json(url: &Url, body: &serde_json::Value) -> Result<Answer, OAuthError> {
    let request = client()?.post(url.clone()).header(ACCEPT, "application/json").json(body);
    send(url, request).await
}

/// POSTs a form (the token endpoint), with HTTP Basic client credentials if given.
pub(crate) async fn post_form(
    url: &Url,
    form: &[(&str, &str)],
    basic_credentials: Option<HeaderValue>,
) -> Result<Answer, OAuthError> {
    let mut request = client()?.post(url.clone()).header(ACCEPT, "application/json").form(form);
    if let Some(credentials) = basic_credentials {
        request = request.header(AUTHORIZATION, credentials);
    }
    send(url, request).await
}

/// Sends a request and reads its answer: a successful one in full (or fails when it is too
/// large), a failed one cut at the bound, since only its OAuth error matters.
async fn send(url: &Url, request: reqwest::RequestBuilder) -> Result<Answer, OAuthError> {
    let transport =
        |error: reqwest::Error| OAuthError::Transport { url: url.to_string(), message: chain(&error) };
    let mut response = request.send().await.map_err(transport)?;
    let status = response.status();
    let too_large = || OAuthError::TooLarge { url: url.to_string(), limit: MAX_RESPONSE_BYTES };
    let declared =
        response.headers().get(CONTENT_LENGTH).and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if status.is_success() && declared.is_some_and(|length| length > MAX_RESPONSE_BYTES as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport)? {
        let room = MAX_RESPONSE_BYTES - body.len();
        if chunk.len() > room {
            if status.is_success() {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk[..room]);
            break;
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Answer { url: url.to_string(), status, body })
}

/// Decodes a JSON answer. `detailed` keeps the decoder's message, which may quote the
/// document: only for documents without secrets.
pub(crate) fn decode<T: DeserializeOwned>(answer: &Answer, detailed: bool) -> Result<T, OAuthError> {
    serde_json::from_slice(&answer.body).map_err(|error| OAuthError::InvalidResponse {
        from: answer.url.clone(),
        reason: if detailed {
            format!("not the expected JSON: {error}")
        } else {
            format!(
                "not the expected JSON ({:?} error at line {}, column {})",
                error.classify(),
                error.line(),
                error.column()
            )
        },
    })
}

/// The error of a failed answer: the OAuth error in its body, or its status.
pub(crate) fn failure(endpoint: &'static str, answer: &Answer) -> OAuthError {
    #[derive(Deserialize)]
    struct ErrorBody {
        error: String,
        #[serde(default)]
        error_description: Option<String>,
    }
    match serde_json::from_slice::<ErrorBody>(&answer.body) {
        Ok(body) if answer.status.is_client_error() || answer.status.is_server_error() => {
            OAuthError::Rejected {
                endpoint,
                status: answer.status.as_u16(),
                error: clean(&body.error),
                description: body.error_description.as_deref().map(clean),
            }
        }
        _ => OAuthError::Status { url: answer.url.clone(), status: answer.status.as_u16() },
    }
}

/// A server-supplied text as it may appear in messages: without control characters, bounded.
pub(crate) fn clean(text: &str) -> String {
    let mut cleaned: String =
        text.chars().filter(|character| !character.is_control()).take(MAX_DESCRIPTION_CHARS).collect();
    if text.chars().count() > MAX_DESCRIPTION_CHARS {
        cleaned.push('…');
    }
    cleaned
}

/// A reqwest error and its causes, without the URL (the caller names it).
fn chain(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return "timed out".to_owned();
    }
    let mut message = error.to_string();
    if let Some(url) = error.url() {
        message = message.replace(&format!(" ({url})"), "").replace(url.as_str(), "<url>");
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// Follows at most five redirects, each to the same origin, so credentials in a request never
/// go to another host.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin =
            attempt.previous().first().is_some_and(|first| first.origin() == attempt.url().origin());
        if !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > 5 {
            attempt.error("too many redirects")
        } else {
            attempt.follow()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_urls_pass() {
        for good in [
            "https://auth.example.com/token",
            "http://127.0.0.1:8080/token",
            "http://127.1.2.3/x",
            "http://localhost:3000/",
            "http://[::1]:9/x",
        ] {
            assert!(checked_url(good).is_ok(), "{good}");
        }
        for bad in [
            "http://auth.example.com/token",
            "http://10.0.0.1/token",
            "ftp://127.0.0.1/x",
            "/token",
            "https://user:pass@auth.example.com/",
            "https://auth.example.com/#frag",
            "http://localhost.evil.com/",
        ] {
            assert!(matches!(checked_url(bad), Err(OAuthError::InvalidUrl { .. })), "{bad}");
        }
        let error = checked_url("http://user:secret1@mcp.example.com/mcp?key=secret2").unwrap_err();
        assert!(!error.to_string().contains("secret"), "{error}");
    }

    #[test]
    fn server_texts_are_cleaned_and_bounded() {
        assert_eq!(clean("bad\r\ncode"), "badcode");
        let long = "x".repeat(2000);
        assert_eq!(clean(&long).chars().count(), MAX_DESCRIPTION_CHARS + 1);
    }
}
