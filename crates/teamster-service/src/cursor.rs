//! Opaque page tokens: a few strings, hex-encoded so they are URL-safe.

use crate::error::ServiceError;

const SEPARATOR: char = '\u{1f}';

pub(crate) fn encode(parts: &[&str]) -> String {
    let joined = parts.join(&SEPARATOR.to_string());
    joined.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Decodes a token made by [`encode`] with exactly `count` parts.
pub(crate) fn decode(token: &str, count: usize) -> Result<Vec<String>, ServiceError> {
    let invalid = || ServiceError::invalid_param("page_token", "page_token is not a valid page token");
    if !token.len().is_multiple_of(2) || token.len() > 2048 {
        return Err(invalid());
    }
    let bytes = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2).unwrap_or("zz"), 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| invalid())?;
    let text = String::from_utf8(bytes).map_err(|_| invalid())?;
    let parts: Vec<String> = text.split(SEPARATOR).map(str::to_owned).collect();
    if parts.len() != count {
        return Err(invalid());
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_and_rejects_garbage() {
        let token = super::encode(&["2025-01-01T00:00:00.000Z", "sess_1"]);
        assert_eq!(super::decode(&token, 2).unwrap(), ["2025-01-01T00:00:00.000Z", "sess_1"]);
        assert!(super::decode(&token, 1).is_err());
        assert!(super::decode("xyz", 2).is_err());
        assert!(super::decode("zz", 1).is_err());
    }
}
