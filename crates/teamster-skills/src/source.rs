//! Where a skill comes from: a git repository, a ref and a directory in it, and the credentials
//! for its host; the checks a source passes before git sees it, and the `Authorization` header
//! git is given (through its environment, never its command line).

use std::fmt;
use std::path::{Component, Path};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::redact::{Redactor, without_userinfo};
use super::{SkillError, check_name};

/// The URL schemes git may use.
const SCHEMES: [&str; 3] = ["https://", "http://", "git://"];
const MAX_URL_BYTES: usize = 2048;
const MAX_REF_BYTES: usize = 255;
const MAX_PATH_BYTES: usize = 1024;

/// A skill in a git repository.
#[derive(Clone, PartialEq, Eq)]
pub struct GitSource {
    /// The name the skill is mounted under.
    pub name: String,
    /// The repository: `https://`, `http://` or `git://`.
    pub url: String,
    /// A branch, a tag, a full ref (`refs/...`), `HEAD`, or a full commit SHA.
    pub reference: String,
    /// The skill's directory in the repository; the repository's root when `None`.
    pub path: Option<String>,
}

impl fmt::Debug for GitSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitSource")
            .field("name", &self.name)
            .field("url", &without_userinfo(&self.url))
            .field("reference", &self.reference)
            .field("path", &self.path)
            .finish()
    }
}

/// Basic credentials for the `https://` repositories of some hosts.
#[derive(Clone, PartialEq, Eq)]
pub struct GitAuth {
    /// The hosts they are for: `example.com`, `example.com:8443`, or `*.example.com` for its
    /// subdomains; compared without regard to case.
    pub hosts: Vec<String>,
    /// The user name.
    pub username: String,
    /// The password or token.
    pub password: String,
}

impl fmt::Debug for GitAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitAuth").field("hosts", &self.hosts).field("username", &self.username).field("password", &"***").finish()
    }
}

impl GitSource {
    /// Checks the source as a fetch would, without fetching: the name, the URL's scheme and
    /// form, the ref and the path. What a registry stores can be checked when it is stored.
    pub fn check(&self) -> Result<(), SkillError> {
        check(self, &[]).map(|_| ())
    }
}

/// A source that passed every check.
pub(crate) struct Checked<'a> {
    /// The URL as given (credentials and all): what git fetches.
    pub(crate) url: &'a str,
    /// The URL without credentials or secrets: what messages show and the cache is keyed by.
    pub(crate) shown_url: String,
    /// The ref, a full commit SHA lowercased.
    pub(crate) reference: String,
    /// The directory, normalized (`a/b`), or `None` for the root.
    pub(crate) path: Option<String>,
    /// The `Authorization` header for this URL, if some credentials match it.
    pub(crate) header: Option<String>,
    /// Every secret of the source and the credentials, for messages.
    pub(crate) redactor: Redactor,
    /// Where git connects to.
    pub(crate) destination: Destination<'a>,
}

/// The host a source's URL names, as git will connect to it.
pub(crate) struct Destination<'a> {
    /// `https`, `http` or `git`.
    pub(crate) scheme: &'static str,
    /// The host, lowercased, without brackets for IPv6.
    pub(crate) host: String,
    /// The port, the scheme's default when the URL names none.
    pub(crate) port: u16,
    /// The URL's authority as written (user info, host and port): what follows `scheme://`.
    pub(crate) authority: &'a str,
}

impl Checked<'_> {
    /// Whether the ref is a full commit SHA (nothing to resolve).
    pub(crate) fn is_commit(&self) -> bool {
        is_full_sha(&self.reference)
    }
}

/// Checks a source and prepares what fetching it needs.
pub(crate) fn check<'a>(source: &'a GitSource, auth: &[GitAuth]) -> Result<Checked<'a>, SkillError> {
    check_name(&source.name)?;
    let url = parse_url(&source.url)?;
    let reference = check_reference(&source.reference)?;
    let path = match &source.path {
        Some(path) => normalize_path(path)?,
        None => None,
    };
    let matching = if url.https { auth.iter().find(|auth| auth.hosts.iter().any(|host| host_matches(host, &url))) } else { None };
    let token = |auth: &GitAuth| STANDARD.encode(format!("{}:{}", auth.username, auth.password));
    // Every password and token given is kept out of messages, not only the one used.
    let mut secrets: Vec<String> = auth.iter().flat_map(|auth| [auth.password.clone(), token(auth)]).collect();
    if let Some(userinfo) = url.userinfo {
        secrets.push(userinfo.to_owned());
        secrets.extend(userinfo.split_once(':').map(|(_, password)| password.to_owned()));
    }
    let redactor = Redactor::new(secrets);
    Ok(Checked {
        url: &source.url,
        shown_url: redactor.redact(&source.url),
        reference,
        path,
        header: matching.map(|auth| format!("Authorization: Basic {}", token(auth))),
        redactor,
        destination: url.destination()?,
    })
}

/// What the checks need of a URL.
struct Url<'a> {
    https: bool,
    /// The host, lowercased, without brackets for IPv6.
    host: String,
    /// The port, if the URL names one.
    port: Option<&'a str>,
    userinfo: Option<&'a str>,
    /// The scheme, without `://`.
    scheme: &'static str,
    /// What follows `scheme://` up to the path.
    authority: &'a str,
}

impl<'a> Url<'a> {
    fn destination(&self) -> Result<Destination<'a>, SkillError> {
        let port = match self.port {
            Some(port) => port.parse().map_err(|_| SkillError::Invalid { field: "url", reason: "the URL's port is out of range".to_owned() })?,
            None => match self.scheme {
                "https" => 443,
                "http" => 80,
                _ => 9418,
            },
        };
        Ok(Destination { scheme: self.scheme, host: self.host.clone(), port, authority: self.authority })
    }
}

fn parse_url(url: &str) -> Result<Url<'_>, SkillError> {
    let invalid = |reason: String| SkillError::Invalid { field: "url", reason };
    let Some(scheme) = SCHEMES.iter().find(|scheme| url.starts_with(*scheme)) else {
        let shown: String = without_userinfo(url).chars().take(40).collect();
        return Err(invalid(format!(
            "only https://, http:// and git:// repositories can be fetched (not file://, ssh, ext:: or local paths); got {shown:?}"
        )));
    };
    if url.len() > MAX_URL_BYTES {
        return Err(invalid(format!("the URL is longer than {MAX_URL_BYTES} bytes")));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid("the URL holds spaces or control characters".to_owned()));
    }
    let rest = &url[scheme.len()..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let (userinfo, host_port) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    let (host, port) = if let Some(bracketed) = host_port.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            return Err(invalid("the URL's IPv6 host is not closed by ']'".to_owned()));
        };
        (host, after.strip_prefix(':'))
    } else {
        match host_port.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    if host.is_empty() || host.starts_with('-') {
        return Err(invalid("the URL names no host".to_owned()));
    }
    if port.is_some_and(|port| port.is_empty() || !port.bytes().all(|byte| byte.is_ascii_digit())) {
        return Err(invalid("the URL's port is not a number".to_owned()));
    }
    if rest.len() == authority.len() || rest[authority.len()..].trim_matches('/').is_empty() {
        return Err(invalid("the URL names no repository".to_owned()));
    }
    Ok(Url {
        https: *scheme == "https://",
        host: host.to_ascii_lowercase(),
        port,
        userinfo,
        scheme: scheme.trim_end_matches("://"),
        authority,
    })
}

/// Whether a credentials' host pattern matches a URL.
fn host_matches(pattern: &str, url: &Url<'_>) -> bool {
    let pattern = pattern.trim().to_ascii_lowercase();
    let (pattern_host, pattern_port) = match pattern.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') || host.ends_with(']') => (host.trim_matches(['[', ']']), Some(port)),
        _ => (pattern.trim_matches(['[', ']']), None),
    };
    if pattern_port.is_some() && pattern_port != url.port {
        return false;
    }
    match pattern_host.strip_prefix("*.") {
        Some(domain) => url.host.strip_suffix(domain).is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
        None => pattern_host == url.host,
    }
}

fn check_reference(reference: &str) -> Result<String, SkillError> {
    let well_formed = !reference.is_empty()
        && reference.len() <= MAX_REF_BYTES
        && !reference.starts_with(['-', '/'])
        && !reference.ends_with('/')
        && !reference.contains("..")
        && !reference.contains("//")
        && reference.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"._-/".contains(&byte));
    if !well_formed {
        return Err(SkillError::Invalid {
            field: "ref",
            reason: format!(
                "{:?} is not a ref: 1 to {MAX_REF_BYTES} letters, digits, '.', '_', '-' and '/', not starting with '-' or \
                 '/', without '..' or '//'",
                reference.chars().take(80).collect::<String>()
            ),
        });
    }
    Ok(if is_full_sha(reference) { reference.to_ascii_lowercase() } else { reference.to_owned() })
}

/// A directory of the repository as `a/b` (`.` components and extra slashes dropped), `None` for
/// the root.
fn normalize_path(path: &str) -> Result<Option<String>, SkillError> {
    let invalid = |reason: &str| SkillError::Invalid {
        field: "path",
        reason: format!("{:?} {reason}", path.chars().take(80).collect::<String>()),
    };
    if path.len() > MAX_PATH_BYTES {
        return Err(invalid("is too long"));
    }
    if !path.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"._-/".contains(&byte)) {
        return Err(invalid("may hold only letters, digits, '.', '_', '-' and '/'"));
    }
    let mut parts = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => return Err(invalid("must not hold '..'")),
            Component::RootDir | Component::Prefix(_) => return Err(invalid("must be relative to the repository's root")),
        }
    }
    Ok(if parts.is_empty() { None } else { Some(parts.join("/")) })
}

/// Whether a ref is a full commit SHA (SHA-1 or SHA-256).
pub(crate) fn is_full_sha(reference: &str) -> bool {
    matches!(reference.len(), 40 | 64) && reference.bytes().all(|byte| byte.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(url: &str, reference: &str, path: Option<&str>) -> GitSource {
        GitSource { name: "pdf".into(), url: url.into(), reference: reference.into(), path: path.map(str::to_owned) }
    }

    #[test]
    fn sources_are_checked_before_git_sees_them() {
        let ok = "https://example.com/skills.git";
        let cases: [(GitSource, Option<&str>); 22] = [
            (source(ok, "main", None), None),
            (source("http://example.com:8080/a/b", "v1.2.0", Some("./skills//pdf/")), None),
            (source("git://127.0.0.1:9418/repo.git", "refs/heads/feature/x", Some(".")), None),
            (source("https://[::1]:8443/repo", "HEAD", None), None),
            (source(ok, "0123456789abcdef0123456789ABCDEF01234567", None), None),
            (source("file:///etc", "main", None), Some("only https://, http:// and git://")),
            (source("ext::sh -c touch% /tmp/x", "main", None), Some("only https://")),
            (source("ssh://git@example.com/r.git", "main", None), Some("only https://")),
            (source("git@example.com:r.git", "main", None), Some("only https://")),
            (source("/srv/repo.git", "main", None), Some("only https://")),
            (source("HTTPS://example.com/r", "main", None), Some("only https://")),
            (source("https://", "main", None), Some("names no host")),
            (source("https://example.com", "main", None), Some("names no repository")),
            (source("https://example.com:x/r", "main", None), Some("port is not a number")),
            (source("https://example.com/a b", "main", None), Some("spaces")),
            (source(ok, "-upload-pack=evil", None), Some("is not a ref")),
            (source(ok, "a..b", None), Some("is not a ref")),
            (source(ok, "main:refs/x", None), Some("is not a ref")),
            (source(ok, "", None), Some("is not a ref")),
            (source(ok, "main", Some("../up")), Some("must not hold '..'")),
            (source(ok, "main", Some("/abs")), Some("must be relative")),
            (source(ok, "main", Some(":(glob)*")), Some("may hold only")),
        ];
        for (source, expected) in cases {
            match (check(&source, &[]), expected) {
                (Ok(_), None) => {}
                (Err(error), Some(expected)) => assert!(error.to_string().contains(expected), "{source:?}: {error}"),
                (Ok(_), Some(expected)) => panic!("{source:?} was accepted, expected {expected:?}"),
                (Err(error), None) => panic!("{source:?}: {error}"),
            }
        }
        let bad_name = GitSource { name: "../x".into(), ..source(ok, "main", None) };
        assert!(check(&bad_name, &[]).err().unwrap().to_string().contains("is not a skill name"));
    }

    #[test]
    fn paths_and_shas_are_normalized() {
        let checked_source = source("https://example.com/r", "0123456789ABCDEF0123456789abcdef01234567", Some("./a//b/"));
        let checked = check(&checked_source, &[]).unwrap();
        assert_eq!(checked.path.as_deref(), Some("a/b"));
        assert!(checked.is_commit());
        assert_eq!(checked.reference, "0123456789abcdef0123456789abcdef01234567");
        let root = source("https://example.com/r", "main", Some("."));
        assert_eq!(check(&root, &[]).unwrap().path, None);
    }

    #[test]
    fn credentials_go_only_to_matching_https_hosts() {
        let auth = |hosts: &[&str]| GitAuth {
            hosts: hosts.iter().map(|host| (*host).to_owned()).collect(),
            username: "bob".into(),
            password: "hunter2".into(),
        };
        let header = "Authorization: Basic Ym9iOmh1bnRlcjI=";
        let cases: [(&str, &[&str], Option<&str>); 9] = [
            ("https://github.com/a/b", &["github.com"], Some(header)),
            ("https://GitHub.com/a/b", &["github.COM"], Some(header)),
            ("https://git.example.com/a/b", &["*.example.com"], Some(header)),
            ("https://example.com/a/b", &["*.example.com"], None),
            ("https://evilexample.com/a/b", &["*.example.com"], None),
            ("https://example.com:8443/a/b", &["example.com:8443"], Some(header)),
            ("https://example.com/a/b", &["example.com:8443"], None),
            ("http://github.com/a/b", &["github.com"], None),
            ("https://github.com.evil.net/a/b", &["github.com"], None),
        ];
        for (url, hosts, expected) in cases {
            let with = source(url, "main", None);
            let auths = [auth(hosts)];
            let checked = check(&with, &auths).unwrap();
            assert_eq!(checked.header.as_deref(), expected, "{url} {hosts:?}");
            assert_eq!(checked.redactor.redact(&format!("{header} hunter2")), "Authorization: Basic *** ***");
        }
        let debug = format!("{:?} {:?}", auth(&["a"]), source("https://bob:hunter2@a/b", "main", None));
        assert!(!debug.contains("hunter2"), "{debug}");
        let in_query = source("https://bob:hunter2@example.com/r.git?token=hunter2", "main", None);
        assert_eq!(check(&in_query, &[auth(&["x"])]).unwrap().shown_url, "https://***@example.com/r.git?token=***");
    }

    #[test]
    fn the_header_is_standard_basic_auth() {
        let credentials = GitAuth { hosts: vec!["example.com".into()], username: "user".into(), password: "pass".into() };
        let repository = source("https://example.com/r.git", "main", None);
        let checked = check(&repository, &[credentials]).unwrap();
        assert_eq!(checked.header.as_deref(), Some("Authorization: Basic dXNlcjpwYXNz"));
    }
}
