//! [`EgressPolicy`]: which destinations a member-supplied URL may reach. Public addresses
//! always; an address in [`FORBIDDEN_RANGES`](crate::FORBIDDEN_RANGES) only when the operator's
//! allow-list names its network, or the host name it was reached by.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use url::{Host, Url};

use crate::ranges::{Cidr, forbidden};

/// How long resolving one host name may take.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest allow-list entry, in bytes (a DNS name has at most 253).
const MAX_ENTRY_BYTES: usize = 253;

/// Why a destination is refused, or an allow-list entry is not understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    /// The URL names an address in a forbidden range.
    #[error("{host} is not a public address ({reason}); member-supplied URLs may not reach it (the operator may allow it with --allow-egress)")]
    ForbiddenAddress { host: String, reason: &'static str },
    /// Every address the name resolves to is in a forbidden range.
    #[error("{host} resolves to an address that is not public ({reason}); member-supplied URLs may not reach it (the operator may allow it with --allow-egress)")]
    ForbiddenName { host: String, reason: &'static str },
    #[error("cannot resolve {host}: {message}")]
    Resolve { host: String, message: String },
    #[error("the URL has no host")]
    NoHost,
    #[error("invalid egress allow-list entry {entry:?}: {reason}")]
    InvalidEntry { entry: String, reason: &'static str },
}

/// The operator's allow-list: networks and host names member-supplied URLs may reach even
/// though they are loopback, private or otherwise forbidden. Empty by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    /// Allowed networks, checked against every address connected to.
    networks: Vec<Cidr>,
    /// Allowed host names, lower case without a trailing dot: every address they resolve to
    /// is allowed (the operator trusts the name's DNS).
    hosts: Vec<String>,
}

impl EgressPolicy {
    /// A policy that allows public addresses only.
    pub fn new() -> EgressPolicy {
        EgressPolicy::default()
    }

    /// A policy from allow-list entries, each a network (`10.0.0.0/8`), an address
    /// (`127.0.0.1`, `::1`) or a host name (`mcp.internal`).
    pub fn parse<I, S>(entries: I) -> Result<EgressPolicy, EgressError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut policy = EgressPolicy::new();
        for entry in entries {
            policy.allow(entry.as_ref())?;
        }
        Ok(policy)
    }

    /// Adds one allow-list entry (see [`EgressPolicy::parse`]).
    pub fn allow(&mut self, entry: &str) -> Result<(), EgressError> {
        let invalid = |reason| EgressError::InvalidEntry { entry: entry.to_owned(), reason };
        let text = entry.trim();
        if text.is_empty() || text.len() > MAX_ENTRY_BYTES {
            return Err(invalid("an entry has 1 to 253 characters"));
        }
        let bare = text.trim_start_matches('[').trim_end_matches(']');
        if text.contains('/') || bare.parse::<IpAddr>().is_ok() {
            let network = bare.parse::<Cidr>().map_err(|_| invalid("not a network such as 10.0.0.0/8 (bits past the prefix must be zero)"))?;
            self.networks.push(network);
            return Ok(());
        }
        let valid_name = text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
        });
        if !valid_name {
            return Err(invalid("not a network, an IP address or a host name"));
        }
        self.hosts.push(text.to_ascii_lowercase());
        Ok(())
    }

    /// Whether the allow-list is empty.
    pub fn is_empty(&self) -> bool {
        self.networks.is_empty() && self.hosts.is_empty()
    }

    /// The allowed networks.
    pub fn networks(&self) -> &[Cidr] {
        &self.networks
    }

    /// The allowed host names.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// Whether the host name is on the allow-list (case and a trailing dot ignored).
    pub fn allows_host(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.');
        self.hosts.iter().any(|allowed| allowed.eq_ignore_ascii_case(host))
    }

    /// Whether the address is in an allowed network (an IPv4-mapped IPv6 address is also
    /// checked as its IPv4 address).
    pub fn allows_ip(&self, ip: IpAddr) -> bool {
        let mapped = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        self.networks.iter().any(|network| network.contains(ip) || mapped.is_some_and(|v4| network.contains(v4)))
    }

    /// Refuses an address in a forbidden range that no allowed network holds; `host` names it
    /// in the error.
    pub fn check_ip(&self, host: &str, ip: IpAddr) -> Result<(), EgressError> {
        match forbidden(ip) {
            Some(reason) if !self.allows_ip(ip) => Err(EgressError::ForbiddenAddress { host: host.to_owned(), reason }),
            _ => Ok(()),
        }
    }

    /// Checks what can be checked of a URL before connecting: an IP-literal host (`127.0.0.1`,
    /// `[::1]`, and forms such as `0x7f000001` that URL parsing turns into one), which no
    /// resolver sees. A host name is checked when it is resolved ([`EgressPolicy::resolve`]).
    pub fn check_url(&self, url: &Url) -> Result<(), EgressError> {
        match url.host() {
            None => Err(EgressError::NoHost),
            Some(Host::Ipv4(ip)) => self.check_ip(&ip.to_string(), IpAddr::V4(ip)),
            Some(Host::Ipv6(ip)) => self.check_ip(&format!("[{ip}]"), IpAddr::V6(ip)),
            Some(Host::Domain(_)) => Ok(()),
        }
    }

    /// Resolves a host (a name or an IP literal) and keeps the addresses it may connect to:
    /// all of them for an allowed name, else those outside the forbidden ranges or in an
    /// allowed network. None left is an error naming why. Bounded by [`RESOLVE_TIMEOUT`].
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, EgressError> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            self.check_ip(host, ip)?;
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let failed = |message: String| EgressError::Resolve { host: host.to_owned(), message };
        let lookup = tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((bare, port)))
            .await
            .map_err(|_| failed(format!("no answer within {} s", RESOLVE_TIMEOUT.as_secs())))?
            .map_err(|error| failed(error.to_string()))?;
        let resolved: Vec<SocketAddr> = lookup.collect();
        if resolved.is_empty() {
            return Err(failed("no addresses".to_owned()));
        }
        if self.allows_host(bare) {
            return Ok(resolved);
        }
        let mut refused = None;
        let permitted: Vec<SocketAddr> = resolved
            .into_iter()
            .filter(|address| match self.check_ip(host, address.ip()) {
                Ok(()) => true,
                Err(EgressError::ForbiddenAddress { reason, .. }) => {
                    refused.get_or_insert(reason);
                    false
                }
                Err(_) => false,
            })
            .collect();
        match (permitted.is_empty(), refused) {
            (true, Some(reason)) => Err(EgressError::ForbiddenName { host: host.to_owned(), reason }),
            (true, None) => Err(failed("no addresses".to_owned())),
            (false, _) => Ok(permitted),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_networks_addresses_or_names() {
        let policy = EgressPolicy::parse(["10.0.0.0/8", "127.0.0.1", "[::1]", "MCP.Internal", "fd00::/8"]).unwrap();
        assert!(policy.allows_ip("10.9.8.7".parse().unwrap()));
        assert!(policy.allows_ip("127.0.0.1".parse().unwrap()));
        assert!(!policy.allows_ip("127.0.0.2".parse().unwrap()));
        assert!(policy.allows_ip("::1".parse().unwrap()));
        assert!(policy.allows_ip("::ffff:10.0.0.1".parse().unwrap()));
        assert!(policy.allows_host("mcp.internal"));
        assert!(policy.allows_host("mcp.internal."));
        assert!(!policy.allows_host("evil.mcp.internal"));
        for bad in ["", "10.1.2.3/8", "a b", "-x.example", "http://x/", "x..y", "10.0.0.0/33"] {
            assert!(EgressPolicy::parse([bad]).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn literal_hosts_are_checked_before_connecting() {
        let policy = EgressPolicy::new();
        let check = |url: &str| policy.check_url(&Url::parse(url).unwrap());
        for url in [
            "http://127.0.0.1:8080/mcp",
            "http://[::1]/mcp",
            "http://0x7f000001/mcp",
            "http://2130706433/mcp",
            "http://127.1/mcp",
            "http://10.0.0.1/mcp",
            "http://169.254.169.254/latest/meta-data",
            "http://[::ffff:127.0.0.1]/mcp",
            "http://0/mcp",
        ] {
            assert!(matches!(check(url), Err(EgressError::ForbiddenAddress { .. })), "{url} was not refused");
        }
        assert!(check("http://93.184.215.14/mcp").is_ok());
        assert!(check("http://example.com/mcp").is_ok(), "names are checked when resolved");
        let allowed = EgressPolicy::parse(["127.0.0.0/8"]).unwrap();
        assert!(allowed.check_url(&Url::parse("http://127.0.0.1:9/").unwrap()).is_ok());
        assert!(allowed.check_url(&Url::parse("http://[::1]:9/").unwrap()).is_err());
    }

    #[tokio::test]
    async fn names_are_checked_on_their_resolved_addresses() {
        let policy = EgressPolicy::new();
        let refused = policy.resolve("localhost", 80).await.unwrap_err();
        assert!(matches!(refused, EgressError::ForbiddenName { reason: "loopback", .. }), "{refused:?}");
        assert!(refused.to_string().contains("localhost resolves to an address that is not public (loopback)"), "{refused}");
        assert!(matches!(policy.resolve("127.0.0.1", 80).await, Err(EgressError::ForbiddenAddress { .. })));
        assert!(matches!(policy.resolve("[::1]", 80).await, Err(EgressError::ForbiddenAddress { .. })));

        let by_name = EgressPolicy::parse(["localhost"]).unwrap();
        let addresses = by_name.resolve("LOCALHOST", 8080).await.unwrap();
        assert!(addresses.iter().all(|address| address.ip().is_loopback() && address.port() == 8080));
        let by_network = EgressPolicy::parse(["127.0.0.0/8"]).unwrap();
        let addresses = by_network.resolve("localhost", 1).await.unwrap();
        assert!(addresses.iter().all(|address| address.ip() == IpAddr::from([127, 0, 0, 1])), "{addresses:?}");
    }
}
