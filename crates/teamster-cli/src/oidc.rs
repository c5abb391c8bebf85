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
    let admin_claim = match args.oidc_admin_claim.as_deref().filter(|claim| !claim.trim().is_empty()) {
        None => None,
        Some(claim) => match claim.split_once('=') {
            Some((name, value)) if !name.trim().is_empty() && !value.trim().is_empty() => Some((name.trim().to_owned(), value.trim().to_owned())),
            _ => bail!("--oidc-admin-claim takes CLAIM=VALUE, such as groups=teamster-admins"),
        },
    };
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
    };
    let login = OidcLogin::new(links, config, key).map_err(|error| anyhow::anyhow!("{error}"))?;
    match login.relying_party().discover().await {
        Ok(()) => tracing::info!(%issuer, redirect_uri = %login.relying_party().config().redirect_uri, "OIDC login is on"),
        Err(error) => tracing::warn!(%issuer, %error, "OIDC login is on, but the identity provider cannot be reached yet; logins wait for it"),
    }
    Ok(Some(Arc::new(login)))
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
