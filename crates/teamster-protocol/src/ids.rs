//! Opaque, URL-path-safe, roughly time-ordered identifiers.

use std::time::{SystemTime, UNIX_EPOCH};

const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// Returns a new id such as `turn_01hx3k...`: the prefix, 10 characters of millisecond time and
/// 16 random characters, all in lowercase Crockford base32 (so ids sort by creation time).
pub fn new_id(prefix: &str) -> String {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default();
    let mut id = String::with_capacity(prefix.len() + 27);
    id.push_str(prefix);
    id.push('_');
    for shift in (0..10).rev() {
        id.push(ALPHABET[((millis >> (shift * 5)) & 31) as usize] as char);
    }
    let mut random = fastrand::u128(..);
    for _ in 0..16 {
        id.push(ALPHABET[(random & 31) as usize] as char);
        random >>= 5;
    }
    id
}

/// Whether a client-supplied id is safe to use in a URL path and in storage: 1 to 128
/// characters of `[A-Za-z0-9._~-]`.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_sortable_and_path_safe() {
        let first = new_id("turn");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = new_id("turn");
        assert!(first.starts_with("turn_"));
        assert_eq!(first.len(), "turn_".len() + 26);
        assert!(first[..15] < second[..15], "{first} should sort before {second}");
        assert!(is_valid_id(&first));
        assert!(!is_valid_id("a/b"));
        assert!(!is_valid_id(""));
    }
}
