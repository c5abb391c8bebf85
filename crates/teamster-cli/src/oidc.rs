//! `teamster serve`'s OIDC flags: browser login with an OpenID Connect provider, on when
//! `--oidc-issuer` is given. The client secret comes from a file or the environment variable
//! `TEAMSTER_OIDC_CLIENT_SECRET`, never from a flag (flags show in `ps` and in `Debug` output).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use teamster_server::{OidcLogin, PublicLinks};
use teamster_service::TokenKey;
use teamster_service::oidc::OidcConfig;

/// The environment variable holding the client secret when no file is named.
const CLIENT_SECRET_ENV: &str = "TEAMSTER_OIDC_CLIENT_SECRET";
/// The largest client secret file read.
const MAX_SECRET_FILE_BYTES: u64 = 4096;

#[derive(clap::Args, Debug, Default)]
pub struct OidcArgs {
    /// Sign users in with this OpenID Connect provider (its issuer URL, e.g.
    /// `https://login.example.com/realms/acme`; `https`, or `http` to loopback). The provider
    /// sends browsers back to `<--public-url>/api/v1/auth/callback`, which must be registered
    /// with it. Works alone or with `--auth api-keys`.
    #[arg(long, env = "TEAMSTER_OIDC_ISSUER")]
    pub oidc_issuer: Option<String>,
    /// The client id registered with the provider (a confidential client).
    #[arg(long, env = "TEAMSTER_OIDC_CLIENT_ID")]
    pub oidc_client_id: Option<String>,
    /// A file holding the client secret (else the environment variable
    /// `TEAMSTER_OIDC_CLIENT_SECRET`).
    #[arg(long, env = "TEAMSTER_OIDC_CLIENT_SECRET_FILE")]
    pub oidc_client_secret_file: Option<PathBuf>,
    /// The scopes asked for (comma-separated; `openid` is always asked for).
    #[arg(long, env = "TEAMSTER_OIDC_SCOPES", value_delimiter = ',', default_value = "openid,email,profile")]
    pub oidc_scopes: Vec<String>,
    /// The ID token claim naming a user's tenant; users without it are in --oidc-default-tenant.
    #[arg(long, env = "TEAMSTER_OIDC_TENANT_CLAIM")]
    pub oidc_tenant_claim: Option<String>,
    /// The tenant of users whose token names none.
    #[arg(long, env = "TEAMSTER_OIDC_DEFAULT_TENANT", default_value = "default")]
    pub oidc_default_tenant: String,
    /// Subjects (`sub` claims) who are admins (comma-separated).
    #[arg(long, env = "TEAMSTER_OIDC_ADMIN_SUBJECTS", value_delimiter = ',')]
    pub oidc_admin_subjects: Vec<String>,
    /// `CLAIM=VALUE`: users whose claim equals VALUE, or lists it (e.g. `groups=teamster-admins`),
    /// are admins.
    #[arg(long, env = "TEAMSTER_OIDC_ADMIN_CLAIM")]
    pub oidc_admin_claim: Option<String>,
    /// Subjects (`sub` claims) who are the server's operator (comma-separated).
    #[arg(long, env = "TEAMSTER_OIDC_OPERATOR_SUBJECTS", value_delimiter = ',')]
    pub oidc_operator_subjects: Vec<String>,
    /// `CLAIM=VALUE`: users whose claim equals VALUE, or lists it (e.g. `groups=teamster-operators`),
    /// are the server's operator (settings, providers, MCP servers, metrics, every tenant's keys).
    #[arg(long, env = "TEAMSTER_OIDC_OPERATOR_CLAIM")]
    pub oidc_operator_claim: Option<String>,
}

impl OidcArgs {
    /// Whether OIDC login is configured.
    pub fn enabled(&self) -> bool {
        self.oidc_issuer.as_deref().is_some_and(|issuer| !issuer.trim().is_empty())
    }
}

/// The login of `args` under `links`' public URL, pending logins sealed under `key`; `None`
/// without `--oidc-issuer`. The provider is asked for its discovery document now, so a mistake
/// shows at start; a provider that cannot be reached yet is only logged (logins wait for it).
pub async fn login(args: &OidcArgs, links: &PublicLinks, key: &TokenKey) -> anyhow::Result<Option<Arc<OidcLogin>>> {
    if !args.enabled() {
        return Ok(None);
    }
    let issuer = args.oidc_issuer.clone().unwrap_or_default().trim().to_owned();
    let Some(client_id) = args.oidc_client_id.clone().filter(|id| !id.trim().is_empty()) else {
        bail!("--oidc-issuer needs --oidc-client-id");
    };
    let client_secret = client_secret(args.oidc_client_secret_file.as_deref())?;
    let admin_claim = claim_flag("--oidc-admin-claim", args.oidc_admin_claim.as_deref(), "groups=teamster-admins")?;
    let operator_claim = claim_flag("--oidc-operator-claim", args.oidc_operator_claim.as_deref(), "groups=teamster-operators")?;
    let config = OidcConfig {
        issuer: issuer.clone(),
        client_id: client_id.trim().to_owned(),
        client_secret,
        redirect_uri: String::new(),
        scopes: args.oidc_scopes.iter().map(|scope| scope.trim().to_owned()).filter(|scope| !scope.is_empty()).collect(),
        tenant_claim: args.oidc_tenant_claim.clone().filter(|claim| !claim.trim().is_empty()),
        default_tenant: args.oidc_default_tenant.trim().to_owned(),
        admin_subjects: args.oidc_admin_subjects.iter().map(|subject| subject.trim().to_owned()).filter(|subject| !subject.is_empty()).collect(),
        admin_claim,
        operator_subjects: args.oidc_operator_subjects.iter().map(|subject| subject.trim().to_owned()).filter(|subject| !subject.is_empty()).collect(),
        operator_claim,
    };
    let login = OidcLogin::new(links, config, key).map_err(|error| anyhow::anyhow!("{error}"))?;
    match login.relying_party().discover().await {
        Ok(()) => tracing::info!(%issuer, redirect_uri = %login.relying_party().config().redirect_uri, "OIDC login is on"),
        Err(error) => tracing::warn!(%issuer, %error, "OIDC login is on, but the identity provider cannot be reached yet; logins wait for it"),
    }
    Ok(Some(Arc::new(login)))
}

/// A `CLAIM=VALUE` flag's claim and value; `None` when it is absent or blank.
fn claim_flag(flag: &str, value: Option<&str>, example: &str) -> anyhow::Result<Option<(String, String)>> {
    match value.filter(|claim| !claim.trim().is_empty()) {
        None => Ok(None),
        Some(claim) => match claim.split_once('=') {
            Some((name, value)) if !name.trim().is_empty() && !value.trim().is_empty() => Ok(Some((name.trim().to_owned(), value.trim().to_owned()))),
            _ => bail!("{flag} takes CLAIM=VALUE, such as {example}"),
        },
    }
}

/// The client secret from `file`, else from `TEAMSTER_OIDC_CLIENT_SECRET`; surrounding
/// whitespace (a file's final newline) is dropped.
fn client_secret(file: Option<&std::path::Path>) -> anyhow::Result<String> {
    let secret = match file {
        Some(path) => {
            use std::io::Read;
            let mut text = String::new();
            std::fs::File::open(path)
                .and_then(|file| file.take(MAX_SECRET_FILE_BYTES).read_to_string(&mut text))
                .with_context(|| format!("reading the OIDC client secret file {}", path.display()))?;
            text
        }
        None => std::env::var(CLIENT_SECRET_ENV).unwrap_or_default(),
    };
    let secret = secret.trim().to_owned();
    if secret.is_empty() {
        bail!("OIDC needs a client secret: name a file with --oidc-client-secret-file or set {CLIENT_SECRET_ENV}");
    }
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_secret_comes_from_its_file_without_the_final_newline() {
        let directory = std::env::temp_dir().join(format!("teamster-oidc-secret-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let file = directory.join("secret");
        std::fs::write(&file, "s3cret\n").unwrap();
        assert_eq!(client_secret(Some(&file)).unwrap(), "s3cret");
        std::fs::write(&file, " \n").unwrap();
        assert!(client_secret(Some(&file)).unwrap_err().to_string().contains("needs a client secret"));
        assert!(client_secret(Some(&directory.join("missing"))).is_err());
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[tokio::test]
    async fn flags_are_checked_before_the_provider_is_asked() {
        let links = PublicLinks::new("http://127.0.0.1:8790").unwrap();
        let key = TokenKey::generate().unwrap();
        assert!(login(&OidcArgs::default(), &links, &key).await.unwrap().is_none(), "off without an issuer");
        let args = OidcArgs { oidc_issuer: Some("http://127.0.0.1:1".into()), ..OidcArgs::default() };
        assert!(login(&args, &links, &key).await.unwrap_err().to_string().contains("--oidc-client-id"));
        let file = std::env::temp_dir().join(format!("teamster-oidc-claim-{}", std::process::id()));
        std::fs::write(&file, "s3cret").unwrap();
        let args = OidcArgs {
            oidc_client_id: Some("teamster".into()),
            oidc_client_secret_file: Some(file.clone()),
            oidc_admin_claim: Some("groups".into()),
            ..args
        };
        assert!(login(&args, &links, &key).await.unwrap_err().to_string().contains("CLAIM=VALUE"));
        let args = OidcArgs { oidc_admin_claim: None, ..args };
        assert!(login(&args, &links, &key).await.unwrap_err().to_string().contains("default tenant"));
        let args = OidcArgs { oidc_issuer: Some("http://idp.example.com".into()), oidc_default_tenant: "default".into(), ..args };
        assert!(login(&args, &links, &key).await.unwrap_err().to_string().contains("must be https"));
        std::fs::remove_file(&file).unwrap();
    }
}
