//! The policy applied to `reqwest`: [`GuardedResolver`] resolves names and drops the addresses
//! the policy forbids, so the check is on the address actually connected to (a name that
//! resolves to 127.0.0.1, or one re-bound between two requests, fails); [`redirect_policy`]
//! checks each redirect's target; [`client_builder`] puts both on a client without proxies.
//!
//! `reqwest` connects to an IP-literal URL without asking the resolver, so callers check each
//! URL they send a request to with [`EgressPolicy::check_url`] first (redirects are checked
//! here).

use std::error::Error as StdError;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::redirect::{Action, Attempt, Policy};

use crate::policy::{EgressError, EgressPolicy};

/// A `reqwest` resolver that keeps only the addresses the policy allows.
#[derive(Clone, Debug)]
pub struct GuardedResolver {
    policy: Arc<EgressPolicy>,
}

impl GuardedResolver {
    pub fn new(policy: Arc<EgressPolicy>) -> GuardedResolver {
        GuardedResolver { policy }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addresses = policy.resolve(&host, 0).await?;
            let addresses: Addrs = Box::new(addresses.into_iter());
            Ok(addresses)
        })
    }
}

/// A redirect policy that refuses a redirect to a target the policy forbids by its literal
/// address (a name is checked when the resolver resolves it), then asks `next`.
pub fn redirect_policy<F>(policy: Arc<EgressPolicy>, next: F) -> Policy
where
    F: Fn(Attempt<'_>) -> Action + Send + Sync + 'static,
{
    Policy::custom(move |attempt| match policy.check_url(attempt.url()) {
        Ok(()) => next(attempt),
        Err(error) => attempt.error(error),
    })
}

/// The most redirects [`client_builder`]'s clients follow.
pub const MAX_REDIRECTS: usize = 5;

/// A client builder for member-supplied URLs: the guarded resolver, redirects checked (at most
/// [`MAX_REDIRECTS`]), and no proxy (a proxy would resolve the target itself). A caller that
/// sets its own redirect policy wraps it in [`redirect_policy`].
pub fn client_builder(policy: Arc<EgressPolicy>) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver::new(Arc::clone(&policy))))
        .redirect(redirect_policy(policy, |attempt| {
            if attempt.previous().len() > MAX_REDIRECTS { attempt.error("too many redirects") } else { attempt.follow() }
        }))
}

/// The egress refusal behind a failed request, if that is why it failed.
pub fn refusal<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a EgressError> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(refused) = error.downcast_ref::<EgressError>() {
            return Some(refused);
        }
        current = error.source();
    }
    None
}
