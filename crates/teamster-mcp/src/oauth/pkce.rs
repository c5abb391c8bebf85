//! Unguessable values from the system's random number generator, and PKCE (RFC 7636) with
//! `S256`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::{SecureRandom, SystemRandom};

use super::OAuthError;

/// Fills a buffer from the operating system's random number generator.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], OAuthError> {
    let mut bytes = [0; N];
    SystemRandom::new().fill(&mut bytes).map_err(|_| OAuthError::Random)?;
    Ok(bytes)
}

/// 256 random bits as 43 URL-safe characters: a `state` or a PKCE code verifier (whose
/// alphabet and length, 43 to 128, this meets).
pub(crate) fn random_token() -> Result<String, OAuthError> {
    Ok(URL_SAFE_NO_PAD.encode(random_bytes::<32>()?))
}

/// The `S256` code challenge of a verifier: `BASE64URL(SHA256(verifier))`.
pub(crate) fn code_challenge(code_verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, code_verifier.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_challenge_is_the_rfc_7636_example() {
        // RFC 7636, appendix B.
        assert_eq!(
            code_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn tokens_are_long_url_safe_and_distinct() {
        let first = random_token().unwrap();
        let second = random_token().unwrap();
        assert_eq!(first.len(), 43);
        assert!(first.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'));
        assert_ne!(first, second);
    }
}
