//! Decoders for numbers that clients send in a looser form than we emit.
//!
//! The gateway client types some integer fields as floats, so `512` arrives as `512.0`. These
//! helpers accept any JSON number with no fractional part (and `null` for optional fields).

use serde::{Deserialize, Deserializer, de::Error as _};

fn integral<E: serde::de::Error>(value: f64) -> Result<u64, E> {
    if value.is_finite() && value >= 0.0 && value.fract() == 0.0 && value <= u64::MAX as f64 {
        Ok(value as u64)
    } else {
        Err(E::custom(format!("expected a non-negative integer, got {value}")))
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Number {
    Int(u64),
    Float(f64),
}

/// Decodes a non-negative integer written as `5` or `5.0`.
pub fn u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    match Number::deserialize(deserializer).map_err(|_| D::Error::custom("expected a number"))? {
        Number::Int(value) => Ok(value),
        Number::Float(value) => integral(value),
    }
}

/// Decodes an optional non-negative integer written as `5`, `5.0` or `null`.
pub fn opt_u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    match Option::<Number>::deserialize(deserializer)
        .map_err(|_| D::Error::custom("expected a number"))?
    {
        None => Ok(None),
        Some(Number::Int(value)) => Ok(Some(value)),
        Some(Number::Float(value)) => integral(value).map(Some),
    }
}

/// Decodes a value where `null` means the type's default, as an absent key does.
pub fn null_as_default<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(deserializer: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Decodes a flag that is on unless it says otherwise: `null` means `true`.
pub fn null_as_true<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    Ok(Option::<bool>::deserialize(deserializer)?.unwrap_or(true))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Probe {
        #[serde(default, deserialize_with = "super::opt_u64")]
        n: Option<u64>,
    }

    #[test]
    fn accepts_integral_floats_and_null() {
        let parse = |s: &str| serde_json::from_str::<Probe>(s).map(|p| p.n);
        assert_eq!(parse(r#"{"n":512.0}"#).unwrap(), Some(512));
        assert_eq!(parse(r#"{"n":7}"#).unwrap(), Some(7));
        assert_eq!(parse(r#"{"n":null}"#).unwrap(), None);
        assert_eq!(parse(r#"{}"#).unwrap(), None);
        assert!(parse(r#"{"n":1.5}"#).is_err());
        assert!(parse(r#"{"n":"3"}"#).is_err());
    }
}
