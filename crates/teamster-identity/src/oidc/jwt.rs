//! ID tokens as JSON Web Tokens: the compact JWS form split and decoded, public keys read from a
//! JWK set, and signatures checked with `ring` (RS256/384/512, PS256/384/512, ES256/384 and
//! EdDSA; never `none` or an HMAC, which a relying party with a public key must not accept).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey, VerificationAlgorithm};
use serde::Deserialize;

use super::OidcError;

/// The longest token read, in bytes; ID tokens are a few kilobytes.
pub(crate) const MAX_TOKEN_BYTES: usize = 16 << 10;

/// A token split into its parts, its signature not yet checked.
pub(crate) struct Jws {
    pub header: Header,
    /// The decoded payload (JSON).
    pub payload: Vec<u8>,
    /// `base64url(header) . base64url(payload)`: what the signature covers.
    pub signing_input: String,
    pub signature: Vec<u8>,
}

/// The JOSE header fields read.
#[derive(Debug, Deserialize)]
pub(crate) struct Header {
    pub alg: String,
    #[serde(default)]
    pub kid: Option<String>,
    /// A critical extension nobody here understands makes the token invalid (RFC 7515 4.1.11).
    #[serde(default)]
    pub crit: Option<serde_json::Value>,
}

fn malformed(reason: &str) -> OidcError {
    OidcError::InvalidToken(format!("the token is malformed: {reason}"))
}

impl Jws {
    /// Splits and decodes a compact JWS; checks nothing of its meaning.
    pub fn parse(token: &str) -> Result<Jws, OidcError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(malformed("it is too long"));
        }
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(malformed("it is not three base64url parts separated by dots"));
        };
        let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|_| malformed("a part is not base64url"));
        let header: Header = serde_json::from_slice(&decode(header)?).map_err(|_| malformed("its header is not a JOSE header"))?;
        if header.crit.is_some() {
            return Err(malformed("its header names critical extensions"));
        }
        Ok(Jws {
            header,
            payload: decode(payload)?,
            signing_input: token[..token.len() - signature.len() - 1].to_owned(),
            signature: decode(signature)?,
        })
    }
}

/// A public key of the provider, from its JWK set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PublicKey {
    pub kid: Option<String>,
    /// The algorithm the key is for, when its JWK says.
    pub alg: Option<String>,
    pub material: KeyMaterial,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeyMaterial {
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// An uncompressed point (`0x04 | x | y`) on the named curve.
    Ec { curve: Curve, point: Vec<u8> },
    Ed25519 { x: Vec<u8> },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Curve {
    P256,
    P384,
}

/// A JWK as a JWK set lists it; unknown members are ignored.
#[derive(Deserialize)]
struct Jwk {
    kty: String,
    #[serde(default, rename = "use")]
    usage: Option<String>,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    alg: Option<String>,
    #[serde(default)]
    n: Option<String>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    crv: Option<String>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<String>,
}

#[derive(Deserialize)]
struct JwkSet {
    keys: Vec<serde_json::Value>,
}

/// The signing keys of a JWK set document; keys of other uses, types or curves, and malformed
/// ones, are skipped (a set may hold keys for others).
pub(crate) fn read_jwks(document: &[u8]) -> Result<Vec<PublicKey>, String> {
    let set: JwkSet = serde_json::from_slice(document).map_err(|error| format!("not a JWK set: {error}"))?;
    Ok(set.keys.into_iter().filter_map(|value| serde_json::from_value::<Jwk>(value).ok()).filter_map(public_key).collect())
}

fn public_key(jwk: Jwk) -> Option<PublicKey> {
    if jwk.usage.as_deref().is_some_and(|usage| usage != "sig") {
        return None;
    }
    let bytes = |text: &Option<String>| text.as_deref().and_then(|text| URL_SAFE_NO_PAD.decode(text).ok());
    let material = match (jwk.kty.as_str(), jwk.crv.as_deref()) {
        ("RSA", _) => KeyMaterial::Rsa { n: bytes(&jwk.n)?, e: bytes(&jwk.e)? },
        ("EC", Some(crv @ ("P-256" | "P-384"))) => {
            let (curve, length) = if crv == "P-256" { (Curve::P256, 32) } else { (Curve::P384, 48) };
            let (x, y) = (bytes(&jwk.x)?, bytes(&jwk.y)?);
            if x.len() != length || y.len() != length {
                return None;
            }
            KeyMaterial::Ec { curve, point: [&[4u8][..], &x, &y].concat() }
        }
        ("OKP", Some("Ed25519")) => KeyMaterial::Ed25519 { x: bytes(&jwk.x)? },
        _ => return None,
    };
    Some(PublicKey { kid: jwk.kid, alg: jwk.alg, material })
}

/// Whether `alg` is one this relying party verifies.
pub(crate) fn supported(alg: &str) -> bool {
    matches!(alg, "RS256" | "RS384" | "RS512" | "PS256" | "PS384" | "PS512" | "ES256" | "ES384" | "EdDSA")
}

impl PublicKey {
    /// Whether this key can check a signature made with `alg`.
    pub fn fits(&self, alg: &str) -> bool {
        if self.alg.as_deref().is_some_and(|own| own != alg) {
            return false;
        }
        match &self.material {
            KeyMaterial::Rsa { .. } => alg.starts_with("RS") || alg.starts_with("PS"),
            KeyMaterial::Ec { curve: Curve::P256, .. } => alg == "ES256",
            KeyMaterial::Ec { curve: Curve::P384, .. } => alg == "ES384",
            KeyMaterial::Ed25519 { .. } => alg == "EdDSA",
        }
    }

    /// Whether `signature` over `message` is this key's, made with `alg`.
    pub fn verifies(&self, alg: &str, message: &[u8], signature: &[u8]) -> bool {
        if !self.fits(alg) {
            return false;
        }
        match &self.material {
            KeyMaterial::Rsa { n, e } => {
                let algorithm: &signature::RsaParameters = match alg {
                    "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
                    "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
                    "RS512" => &signature::RSA_PKCS1_2048_8192_SHA512,
                    "PS256" => &signature::RSA_PSS_2048_8192_SHA256,
                    "PS384" => &signature::RSA_PSS_2048_8192_SHA384,
                    "PS512" => &signature::RSA_PSS_2048_8192_SHA512,
                    _ => return false,
                };
                RsaPublicKeyComponents { n, e }.verify(algorithm, message, signature).is_ok()
            }
            KeyMaterial::Ec { curve, point } => {
                let algorithm: &dyn VerificationAlgorithm = match curve {
                    Curve::P256 => &signature::ECDSA_P256_SHA256_FIXED,
                    Curve::P384 => &signature::ECDSA_P384_SHA384_FIXED,
                };
                UnparsedPublicKey::new(algorithm, point).verify(message, signature).is_ok()
            }
            KeyMaterial::Ed25519 { x } => UnparsedPublicKey::new(&signature::ED25519, x).verify(message, signature).is_ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair};

    use super::*;

    fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    #[test]
    fn es256_and_eddsa_signatures_verify_and_tampering_fails() {
        let random = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &random).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &random).unwrap();
        let point = pair.public_key().as_ref();
        let jwks = serde_json::json!({"keys": [
            {"kty": "EC", "crv": "P-256", "kid": "ec", "x": b64(&point[1..33]), "y": b64(&point[33..])},
            {"kty": "EC", "crv": "P-521", "kid": "skipped", "x": "AA", "y": "AA"},
            {"kty": "RSA", "use": "enc", "kid": "for-encryption", "n": "AQAB", "e": "AQAB"},
        ]});
        let keys = read_jwks(jwks.to_string().as_bytes()).unwrap();
        assert_eq!(keys.len(), 1);
        let token = format!("{}.{}", b64(br#"{"alg":"ES256","kid":"ec"}"#), b64(br#"{"sub":"ann"}"#));
        let signature = pair.sign(&random, token.as_bytes()).unwrap();
        let jws = Jws::parse(&format!("{token}.{}", b64(signature.as_ref()))).unwrap();
        assert_eq!((jws.header.alg.as_str(), jws.header.kid.as_deref()), ("ES256", Some("ec")));
        assert!(keys[0].verifies("ES256", jws.signing_input.as_bytes(), &jws.signature));
        assert!(!keys[0].verifies("RS256", jws.signing_input.as_bytes(), &jws.signature), "another algorithm");
        let forged = format!("{}.{}", b64(br#"{"alg":"ES256","kid":"ec"}"#), b64(br#"{"sub":"bob"}"#));
        assert!(!keys[0].verifies("ES256", forged.as_bytes(), &jws.signature));

        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&random).unwrap();
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        let jwks = serde_json::json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": b64(pair.public_key().as_ref())}]});
        let keys = read_jwks(jwks.to_string().as_bytes()).unwrap();
        let signature = pair.sign(b"message");
        assert!(keys[0].verifies("EdDSA", b"message", signature.as_ref()));
        assert!(!keys[0].verifies("EdDSA", b"massage", signature.as_ref()));
    }

    #[test]
    fn malformed_tokens_and_unsafe_algorithms_are_refused() {
        for token in ["", "a.b", "a.b.c.d", "!!.e30.AA", &format!("{}.e30.AA", b64(br#"{"alg":"RS256","crit":["x"]}"#))] {
            assert!(Jws::parse(token).is_err(), "{token}");
        }
        assert!(Jws::parse(&"a".repeat(MAX_TOKEN_BYTES + 1)).is_err());
        for alg in ["none", "HS256", "RS1", ""] {
            assert!(!supported(alg), "{alg}");
        }
        assert!(supported("RS256") && supported("ES256"));
    }
}
