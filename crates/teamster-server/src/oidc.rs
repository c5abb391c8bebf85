//! OIDC login on the HTTP side: the relying party ([`teamster_service::oidc::Oidc`]) under this
//! server's public URL, and the cookies of a browser session.
//!
//! - `id_token` (`__Host-id_token` when the public URL is `https`: the browser then takes it
//!   only from this very origin over TLS, with `Path=/` and no `Domain`, so a sibling subdomain
//!   or a plain-http page cannot plant one): the verified ID token itself, `HttpOnly`,
//!   `SameSite=Lax`, `Path=/`, `Secure` on `https`, `Max-Age` until the token's `exp`. Every
//!   request carrying it is verified like a bearer ID token (signature, issuer, audience,
//!   expiry), so any replica accepts it and nothing is stored. On `https` only the prefixed name
//!   is read.
//! - `oidc_login_<state prefix>`: a login in progress, sealed and bound to its `state`
//!   (`Path` of the callback, ten minutes), cleared by the callback. One per login, so logins
//!   begun in two tabs do not undo each other.
//!
//! A request authenticated by the cookie with an unsafe method (anything but `GET`, `HEAD` and
//! `OPTIONS`) must name this server's own origin in `Origin` (or, without one, `Referer`):
//! `SameSite=Lax` keeps cookies off cross-site posts, but not off those from another port of the
//! same host, and CORS origins the operator allows are not meant to act with a user's cookie.

use axum::http::{HeaderMap, HeaderValue, Method, header};
use teamster_service::TokenKey;
use teamster_service::oidc::{Oidc, OidcConfig, OidcError};

use crate::links::PublicLinks;

/// The session cookie's name (the spec's) on a plain-http public URL.
const SESSION_COOKIE: &str = "id_token";
/// The session cookie's name on an `https` public URL.
const SECURE_SESSION_COOKIE: &str = "__Host-id_token";
/// What a pending login's cookie name starts with.
const PENDING_COOKIE_PREFIX: &str = "oidc_login_";
/// How many characters of the `state` name a pending login's cookie.
const PENDING_COOKIE_STATE_CHARS: usize = 16;
/// The callback's path under `/api/v1`.
const CALLBACK_PATH: &str = "/api/v1/auth/callback";

/// The relying party and where this server lives.
#[derive(Debug)]
pub struct OidcLogin {
    pub(crate) relying_party: Oidc,
    /// The public URL, without a trailing slash.
    public_url: String,
    /// `scheme://host[:port]` of the public URL, lowercase.
    public_origin: String,
    /// The public URL's path (the tenant prefix; empty at the root).
    public_path: String,
}

impl OidcLogin {
    /// The relying party of `config` under `links`' public URL: the redirect URI is its
    /// `/api/v1/auth/callback`. Pending logins are sealed under `key`.
    pub fn new(links: &PublicLinks, mut config: OidcConfig, key: &TokenKey) -> Result<OidcLogin, OidcError> {
        let public_url = links.public_url().to_owned();
        config.redirect_uri = format!("{public_url}{CALLBACK_PATH}");
        let (scheme, rest) = public_url.split_once("://").unwrap_or(("http", &public_url));
        let (authority, path) = rest.split_once('/').map_or((rest, String::new()), |(authority, path)| (authority, format!("/{path}")));
        let public_origin = format!("{}://{}", scheme.to_ascii_lowercase(), authority.to_ascii_lowercase());
        Ok(OidcLogin { relying_party: Oidc::new(config, key)?, public_url, public_origin, public_path: path })
    }

    /// The relying party, e.g. to discover the provider at start-up.
    pub fn relying_party(&self) -> &Oidc {
        &self.relying_party
    }

    /// Whether cookies are `Secure`: the public URL is `https`.
    fn secure(&self) -> bool {
        self.public_url.starts_with("https://")
    }

    /// The app's root: where a login without a (valid) `return_to` lands.
    pub(crate) fn app_root(&self) -> String {
        format!("{}/", self.public_path)
    }

    /// The app's root with an error marker, for a failed login.
    pub(crate) fn app_error(&self, code: &str) -> String {
        format!("{}/?error={code}", self.public_path)
    }

    /// The session cookie's name: `__Host-id_token` on an `https` public URL, else `id_token`.
    pub(crate) fn session_cookie_name(&self) -> &'static str {
        if self.secure() { SECURE_SESSION_COOKIE } else { SESSION_COOKIE }
    }

    /// The session cookie holding `id_token` for `max_age_secs` (`Path=/` and no `Domain`, as
    /// the `__Host-` prefix requires).
    pub(crate) fn session_cookie(&self, id_token: &str, max_age_secs: u64) -> Option<HeaderValue> {
        self.cookie(self.session_cookie_name(), id_token, "/", max_age_secs)
    }

    /// The `Set-Cookie` that removes the session cookie.
    pub(crate) fn clear_session(&self) -> Option<HeaderValue> {
        self.cookie(self.session_cookie_name(), "", "/", 0)
    }

    /// The pending login's cookie for `state`, or the one that removes it (`sealed` empty).
    pub(crate) fn pending_cookie(&self, state: &str, sealed: &str, max_age_secs: u64) -> Option<HeaderValue> {
        self.cookie(&pending_cookie_name(state), sealed, &format!("{}{CALLBACK_PATH}", self.public_path), max_age_secs)
    }

    fn cookie(&self, name: &str, value: &str, path: &str, max_age_secs: u64) -> Option<HeaderValue> {
        let secure = if self.secure() { "; Secure" } else { "" };
        HeaderValue::from_str(&format!("{name}={value}; Path={path}; Max-Age={max_age_secs}; HttpOnly; SameSite=Lax{secure}")).ok()
    }

    /// Whether a cookie-authenticated request may do what its method does: safe methods always;
    /// others only from this server's own pages (`Origin`, else `Referer`, is the public origin
    /// or the origin of the `Host` the request names).
    pub(crate) fn allows_cookie_request(&self, method: &Method, headers: &HeaderMap) -> bool {
        if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return true;
        }
        let origin = match headers.get(header::ORIGIN).and_then(|value| value.to_str().ok()) {
            Some(origin) => origin.to_ascii_lowercase(),
            None => match headers.get(header::REFERER).and_then(|value| value.to_str().ok()).and_then(origin_of) {
                Some(origin) => origin,
                None => return false,
            },
        };
        if same_origin(&origin, &self.public_origin) {
            return true;
        }
        headers.get(header::HOST).and_then(|value| value.to_str().ok()).is_some_and(|host| {
            ["http", "https"].iter().any(|scheme| same_origin(&origin, &format!("{scheme}://{}", host.to_ascii_lowercase())))
        })
    }
}

/// A pending login's cookie name: the prefix and the start of its `state` (base64url, so a
/// valid cookie name).
fn pending_cookie_name(state: &str) -> String {
    let start: String = state.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_')).take(PENDING_COOKIE_STATE_CHARS).collect();
    format!("{PENDING_COOKIE_PREFIX}{start}")
}

/// The pending login's sealed value the browser sent for `state`.
pub(crate) fn pending_from(headers: &HeaderMap, state: &str) -> Option<String> {
    cookie(headers, &pending_cookie_name(state))
}

/// The value of the cookie `name` in a request's `Cookie` headers (the first, when repeated).
pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim().trim_matches('"').to_owned())
        .filter(|value| !value.is_empty())
}

/// `scheme://authority` of an absolute URL, lowercase.
fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    (!authority.is_empty()).then(|| format!("{}://{}", scheme.to_ascii_lowercase(), authority.to_ascii_lowercase()))
}

/// Whether two origins are the same, a scheme's default port written or not.
fn same_origin(left: &str, right: &str) -> bool {
    let normal = |origin: &str| -> String {
        let origin = origin.trim_end_matches('/');
        origin.strip_suffix(":443").filter(|_| origin.starts_with("https://")).or_else(|| origin.strip_suffix(":80").filter(|_| origin.starts_with("http://"))).unwrap_or(origin).to_owned()
    };
    normal(left) == normal(right)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn login(public_url: &str) -> OidcLogin {
        let config = OidcConfig {
            issuer: "http://127.0.0.1:1".into(),
            client_id: "teamster".into(),
            client_secret: "s3cret".into(),
            redirect_uri: String::new(),
            scopes: vec![],
            tenant_claim: None,
            default_tenant: "default".into(),
            admin_subjects: vec![],
            admin_claim: None,
            operator_subjects: vec![],
            operator_claim: None,
        };
        OidcLogin::new(&PublicLinks::new(public_url).unwrap(), config, &TokenKey::generate().unwrap()).unwrap()
    }

    #[test]
    fn the_redirect_uri_and_cookies_follow_the_public_url() {
        let plain = login("http://127.0.0.1:8790");
        assert_eq!(plain.relying_party.config().redirect_uri, "http://127.0.0.1:8790/api/v1/auth/callback");
        assert_eq!(plain.app_root(), "/");
        assert_eq!(plain.session_cookie("t", 60).unwrap(), "id_token=t; Path=/; Max-Age=60; HttpOnly; SameSite=Lax");
        // On https the session cookie takes the `__Host-` prefix, and only that name is read.
        let secure = login("https://agents.example.com");
        assert_eq!(secure.session_cookie("t", 60).unwrap(), "__Host-id_token=t; Path=/; Max-Age=60; HttpOnly; SameSite=Lax; Secure");
        assert_eq!(secure.clear_session().unwrap(), "__Host-id_token=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax; Secure");
        let prefixed = login("https://agents.example.com/t1/");
        assert_eq!(prefixed.relying_party.config().redirect_uri, "https://agents.example.com/t1/api/v1/auth/callback");
        assert_eq!((prefixed.app_root(), prefixed.app_error("invalid_state")), ("/t1/".to_owned(), "/t1/?error=invalid_state".to_owned()));
        assert_eq!(
            prefixed.pending_cookie("abcdefghijklmnopqrstuvwxyz", "sealed", 600).unwrap(),
            "oidc_login_abcdefghijklmnop=sealed; Path=/t1/api/v1/auth/callback; Max-Age=600; HttpOnly; SameSite=Lax; Secure"
        );
    }

    #[test]
    fn cookie_requests_that_change_things_must_come_from_our_pages() {
        let login = login("https://agents.example.com");
        let headers = |pairs: &[(header::HeaderName, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(name.clone(), HeaderValue::from_str(value).unwrap());
            }
            map
        };
        assert!(login.allows_cookie_request(&Method::GET, &headers(&[])));
        assert!(!login.allows_cookie_request(&Method::POST, &headers(&[])));
        assert!(login.allows_cookie_request(&Method::POST, &headers(&[(header::ORIGIN, "https://agents.example.com")])));
        assert!(login.allows_cookie_request(&Method::DELETE, &headers(&[(header::REFERER, "https://agents.example.com:443/#/chat")])));
        assert!(!login.allows_cookie_request(&Method::POST, &headers(&[(header::ORIGIN, "https://evil.example")])));
        assert!(!login.allows_cookie_request(&Method::POST, &headers(&[(header::ORIGIN, "https://agents.example.com:8443")])));
        assert!(!login.allows_cookie_request(&Method::PATCH, &headers(&[(header::ORIGIN, "null")])));
        // The origin of the Host the request names (e.g. a loopback name) is this server too.
        let local = headers(&[(header::ORIGIN, "https://localhost:8790"), (header::HOST, "localhost:8790")]);
        assert!(login.allows_cookie_request(&Method::PUT, &local));
        let mut cookies = HeaderMap::new();
        cookies.append(header::COOKIE, HeaderValue::from_static("a=1; id_token=tok"));
        cookies.append(header::COOKIE, HeaderValue::from_static("oidc_login_abc=sealed"));
        assert_eq!(cookie(&cookies, login.session_cookie_name()), None, "an https server reads only the __Host- cookie");
        assert_eq!(cookie(&cookies, SESSION_COOKIE).as_deref(), Some("tok"));
        assert_eq!(pending_from(&cookies, "abc").as_deref(), Some("sealed"));
        assert_eq!(cookie(&cookies, "b"), None);
    }
}
