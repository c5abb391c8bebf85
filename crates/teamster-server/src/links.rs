//! Links to this server's own pages for the service: the MCP OAuth authorize and callback
//! routes under the public URL users' browsers reach the server at (with any path prefix).

use teamster_service::McpLinks;

/// The server's [`McpLinks`], under its public URL.
#[derive(Clone, Debug)]
pub struct PublicLinks {
    /// The public URL without a trailing slash.
    public_url: String,
}

impl PublicLinks {
    /// Links under `public_url`: absolute `http` or `https` with a host, and without user,
    /// query or fragment; a trailing slash is dropped. The message says what is wrong.
    pub fn new(public_url: &str) -> Result<PublicLinks, String> {
        let scheme_end = public_url.find("://").ok_or_else(|| format!("{public_url:?} must be an absolute http or https URL"))?;
        let (scheme, rest) = (&public_url[..scheme_end], &public_url[scheme_end + 3..]);
        if !matches!(scheme, "http" | "https") {
            return Err(format!("{public_url:?} must be an absolute http or https URL"));
        }
        let host = rest.split('/').next().unwrap_or_default();
        if host.is_empty() || host.starts_with(':') {
            return Err(format!("{public_url:?} has no host"));
        }
        if rest.contains(['?', '#', '@']) || rest.contains(char::is_whitespace) {
            return Err(format!("{public_url:?} must have no user, query or fragment"));
        }
        Ok(PublicLinks { public_url: public_url.trim_end_matches('/').to_owned() })
    }

    /// The public URL, without a trailing slash.
    pub fn public_url(&self) -> &str {
        &self.public_url
    }
}

impl McpLinks for PublicLinks {
    fn authorize(&self, server: &str, ticket: &str) -> String {
        format!("{}/api/v1/mcp-servers/{server}/authorize?ticket={ticket}", self.public_url)
    }

    fn callback(&self) -> String {
        format!("{}/api/v1/mcp-servers/oauth/callback", self.public_url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_urls_are_checked_and_trimmed() {
        assert_eq!(PublicLinks::new("https://agents.example.com/").unwrap().public_url(), "https://agents.example.com");
        let links = PublicLinks::new("http://127.0.0.1:8790/t1/").unwrap();
        assert_eq!(links.callback(), "http://127.0.0.1:8790/t1/api/v1/mcp-servers/oauth/callback");
        assert_eq!(links.authorize("gh", "v1.x"), "http://127.0.0.1:8790/t1/api/v1/mcp-servers/gh/authorize?ticket=v1.x");
        for bad in ["ftp://x", "agents.example.com", "https://a.example/?x=1", "https://u:p@a.example", "http://", "https:///x"] {
            assert!(PublicLinks::new(bad).is_err(), "{bad}");
        }
    }
}
