//! Bounds on what a client sends: the length of every id it names and the size of
//! every number it reports. A value out of bounds is a 400 `invalid_request` naming
//! the field and the limit (never echoing the value back).

use crate::error::ApiError;

/// The largest token count a client may report: 2^53 − 1, the largest integer that
/// JSON numbers (IEEE doubles) and Redis' Lua represent exactly.
pub const MAX_TOKENS: u64 = (1 << 53) - 1;

/// The longest latency a client may report, in milliseconds: one day.
pub const MAX_LATENCY_MS: u64 = 24 * 60 * 60 * 1000;

/// Checks that the id in `field` is at most `max` bytes long.
///
/// # Errors
///
/// [`ApiError::InvalidRequest`] naming the field, its length and the limit.
pub fn id(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
    if value.len() <= max {
        return Ok(());
    }
    Err(ApiError::InvalidRequest(format!(
        "{field}: {} bytes long; at most {max} bytes are accepted ([gateway] max_id_length)",
        value.len()
    )))
}

/// As [`id`], for an optional field.
///
/// # Errors
///
/// As [`id`].
pub fn opt_id(field: &str, value: Option<&str>, max: usize) -> Result<(), ApiError> {
    value.map_or(Ok(()), |v| id(field, v, max))
}

/// Checks that the number in `field` is at most `max`.
///
/// # Errors
///
/// [`ApiError::InvalidRequest`] naming the field, the value and the limit.
pub fn number(field: &str, value: Option<u64>, max: u64) -> Result<(), ApiError> {
    match value {
        Some(n) if n > max => Err(ApiError::InvalidRequest(format!(
            "{field}: {n} is larger than the limit of {max}"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_at_the_bound_passes_and_one_past_it_names_field_and_limit() {
        assert!(id("tool", "abcd", 4).is_ok());
        let e = id("tool", "abcde", 4).expect_err("too long").to_string();
        assert!(e.contains("tool: 5 bytes long; at most 4 bytes"), "{e}");
        assert!(opt_id("tenant", None, 0).is_ok());
        assert!(number("tokens", Some(MAX_TOKENS), MAX_TOKENS).is_ok());
        let e = number("tokens", Some(u64::MAX), MAX_TOKENS)
            .expect_err("too large")
            .to_string();
        assert!(
            e.contains("tokens: 18446744073709551615 is larger than the limit of 9007199254740991"),
            "{e}"
        );
    }
}
