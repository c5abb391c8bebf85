//! [`TokenSet`]: the tokens of one user for one MCP server, and how a token endpoint's answer
//! becomes one.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::OAuthError;
use super::fetch::{Answer, decode};

/// The longest token lifetime believed, so a huge `expires_in` cannot overflow the clock.
const MAX_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The tokens one user holds for one MCP server. Serialized (for sealing with a
/// [`TokenCipher`](super::TokenCipher)) as JSON with `expires_at` in Unix seconds.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenSet {
    /// The bearer token sent to the MCP server.
    pub access_token: String,
    /// The token that renews the access token, if the authorization server issued one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// When the access token expires; `None` when the server did not say.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "unix_seconds")]
    pub expires_at: Option<SystemTime>,
    /// The scope granted, space-separated, if the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

impl TokenSet {
    /// Whether the access token has expired at `now`.
    pub fn is_expired(&self, now: SystemTime) -> bool {
        self.expires_at.is_some_and(|expires_at| expires_at <= now)
    }

    /// Whether the access token expires within `skew` of `now` (or already has).
    pub fn expires_within(&self, skew: Duration, now: SystemTime) -> bool {
        let limit = now.checked_add(skew);
        self.expires_at.is_some_and(|expires_at| limit.is_none_or(|limit| expires_at <= limit))
    }

    /// Reads a successful token endpoint answer (RFC 6749 section 5.1) received at `now`. A
    /// refresh answer may leave out the refresh token and the scope; `previous` supplies them.
    pub(crate) fn from_answer(
        answer: &Answer,
        now: SystemTime,
        previous: Option<&TokenSet>,
    ) -> Result<TokenSet, OAuthError> {
        #[derive(Deserialize)]
        struct TokenResponse {
            access_token: String,
            token_type: String,
            #[serde(default)]
            expires_in: Option<serde_json::Value>,
            #[serde(default)]
            refresh_token: Option<String>,
            #[serde(default)]
            scope: Option<String>,
        }
        let invalid = |reason: &str| OAuthError::InvalidResponse {
            from: answer.url.clone(),
            reason: reason.to_owned(),
        };
        let response: TokenResponse = decode(answer, false)?;
        if response.access_token.is_empty() {
            return Err(invalid("the access token is empty"));
        }
        if !response.token_type.eq_ignore_ascii_case("bearer") {
            return Err(invalid("the token type is not Bearer"));
        }
        // Some servers send the lifetime as a string; whole seconds either way.
        let lifetime = match &response.expires_in {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::Number(number)) => number.as_u64().or_else(|| {
                number
                    .as_f64()
                    .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
                    .map(|seconds| seconds as u64)
            }),
            Some(serde_json::Value::String(text)) => text.trim().parse::<u64>().ok(),
            Some(_) => None,
        };
        if response.expires_in.as_ref().is_some_and(|value| !value.is_null()) && lifetime.is_none() {
            return Err(invalid("expires_in is not a number of seconds"));
        }
        // Whole seconds, rounded down, so the stored form is exact and expiry never late.
        let now_seconds = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let expires_at = lifetime.map(|seconds| {
            UNIX_EPOCH + Duration::from_secs(now_seconds) + Duration::from_secs(seconds).min(MAX_LIFETIME)
        });
        Ok(TokenSet {
            access_token: response.access_token,
            refresh_token: response
                .refresh_token
                .filter(|token| !token.is_empty())
                .or_else(|| previous.and_then(|previous| previous.refresh_token.clone())),
            expires_at,
            scope: response.scope.or_else(|| previous.and_then(|previous| previous.scope.clone())),
        })
    }
}

impl fmt::Debug for TokenSet {
    /// The tokens are credentials, so only whether they are there is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSet")
            .field("access_token", &"<redacted>")
            .field("refresh_token", &self.refresh_token.as_ref().map(|_| "<redacted>"))
            .field("expires_at", &self.expires_at)
            .field("scope", &self.scope)
            .finish()
    }
}

/// `Option<SystemTime>` as whole Unix seconds.
pub(crate) mod unix_seconds {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(crate) fn serialize<S: Serializer>(
        time: &Option<SystemTime>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        time.map(|time| time.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()).serialize(serializer)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<SystemTime>, D::Error> {
        match Option::<u64>::deserialize(deserializer)? {
            None => Ok(None),
            Some(seconds) => UNIX_EPOCH
                .checked_add(Duration::from_secs(seconds))
                .map(Some)
                .ok_or_else(|| D::Error::custom("the time is out of range")),
        }
    }
}

#[cfg(test)]
mod tests {
    use reqwest::StatusCode;

    use super::*;

    fn answer(body: &str) -> Answer {
        Answer {
            url: "https://as.example/token".into(),
            status: StatusCode::OK,
            body: body.as_bytes().to_vec(),
        }
    }

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn a_token_answer_becomes_a_token_set() {
        let now = at(1000) + Duration::from_millis(700);
        let body = concat!(
            r#"{"access_token":"a1","token_type":"bearer","expires_in":60,"#,
            r#""refresh_token":"r1","scope":"mcp"}"#
        );
        let tokens = TokenSet::from_answer(&answer(body), now, None).unwrap();
        assert_eq!(tokens.access_token, "a1");
        assert_eq!(tokens.refresh_token.as_deref(), Some("r1"));
        assert_eq!(tokens.expires_at, Some(at(1060)));
        assert_eq!(tokens.scope.as_deref(), Some("mcp"));
        assert!(!tokens.expires_within(Duration::from_secs(30), now));
        assert!(tokens.expires_within(Duration::from_secs(60), now));
        assert!(tokens.is_expired(at(1060)));

        let refreshed = TokenSet::from_answer(
            &answer(r#"{"access_token":"a2","token_type":"Bearer","expires_in":"30"}"#),
            at(2000),
            Some(&tokens),
        )
        .unwrap();
        assert_eq!(refreshed.refresh_token.as_deref(), Some("r1"));
        assert_eq!(refreshed.scope.as_deref(), Some("mcp"));
        assert_eq!(refreshed.expires_at, Some(at(2030)));
    }

    #[test]
    fn bad_token_answers_are_refused_without_quoting_them() {
        for body in [
            r#"{"access_token":"secret-1","token_type":"DPoP"}"#,
            r#"{"access_token":"","token_type":"Bearer"}"#,
            r#"{"access_token":"secret-1","token_type":"Bearer","expires_in":"soon"}"#,
            r#"{"access_token":12345678,"token_type":"Bearer"}"#,
            r#"{"token_type":"Bearer"}"#,
        ] {
            let error = TokenSet::from_answer(&answer(body), at(0), None).unwrap_err();
            assert!(matches!(error, OAuthError::InvalidResponse { .. }), "{body}: {error:?}");
            assert!(
                !error.to_string().contains("secret-1") && !error.to_string().contains("12345678"),
                "{error}"
            );
        }
    }

    #[test]
    fn debug_hides_the_tokens() {
        let tokens = TokenSet {
            access_token: "secret-a".into(),
            refresh_token: Some("secret-r".into()),
            expires_at: None,
            scope: None,
        };
        let debug = format!("{tokens:?}");
        assert!(!debug.contains("secret"), "{debug}");
    }
}
