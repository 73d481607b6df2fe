//! What a request says of its call's urgency: its `priority` class and its
//! `deadline`, on `POST /v1/admit`, `/v1/reserve` (per call) and
//! `POST /v1/tools/{tool}/invoke`.
//!
//! `priority` is `"interactive"`, `"default"` or `"batch"`. `deadline` is read as
//! the mesh envelope reads it ([`toolgate_mesh::envelope::parse_deadline`]): an RFC
//! 3339 string or Unix milliseconds, on the wall clock; at most
//! [`MAX_DEADLINE_AHEAD`] ahead. Anything else is a 400 `invalid_request` naming the
//! field. The deadline becomes a time on the engine's clock ([`engine_deadline`]),
//! which bounds the call's wait by its tool's observed run time
//! ([`toolgate::Call::deadline`]).

use std::time::{Duration, SystemTime};

use serde_json::Value;
use toolgate::{Nanos, Priority};

use crate::error::ApiError;

/// How far ahead a request's deadline may lie: one day (a longer one bounds
/// nothing the request timeout does not, and is more likely a unit mistake).
pub const MAX_DEADLINE_AHEAD: Duration = Duration::from_secs(24 * 60 * 60);

/// The priority class in `field` (absent: `default`).
///
/// # Errors
///
/// [`ApiError::InvalidRequest`] for a name other than the three.
pub fn priority(field: &str, v: Option<&str>) -> Result<Priority, ApiError> {
    match v {
        None => Ok(Priority::Default),
        Some(s) => s.parse().map_err(|e| {
            let shown: String = s.chars().take(32).collect();
            ApiError::InvalidRequest(format!("{field}: {shown:?}: {e}"))
        }),
    }
}

/// The time left until the deadline `v` (of `field`) at the wall-clock time `now`
/// (`Duration::ZERO` once it has passed).
///
/// # Errors
///
/// [`ApiError::InvalidRequest`] for an unreadable deadline or one more than
/// [`MAX_DEADLINE_AHEAD`] ahead.
pub fn deadline(field: &str, v: &Value, now: SystemTime) -> Result<Duration, ApiError> {
    let at = toolgate_mesh::envelope::parse_deadline(v).map_err(|e| {
        // The mesh's message starts with its own field name, `deadline`.
        let what = e.strip_prefix("deadline: ").unwrap_or(&e);
        ApiError::InvalidRequest(format!("{field}: {what}"))
    })?;
    let left = at.duration_since(now).unwrap_or(Duration::ZERO);
    if left > MAX_DEADLINE_AHEAD {
        return Err(ApiError::InvalidRequest(format!(
            "{field}: {} s ahead; at most {} s ahead is accepted",
            left.as_secs(),
            MAX_DEADLINE_AHEAD.as_secs()
        )));
    }
    Ok(left)
}

/// The deadline `left` from `now` on the engine's clock. No time left (a deadline
/// at or before now) is a time already past, which refuses the call at once.
pub fn engine_deadline(now: Nanos, left: Duration) -> Nanos {
    if left.is_zero() {
        return now.saturating_sub(1);
    }
    now.saturating_add(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use serde_json::json;

    use super::*;

    #[test]
    fn priorities_are_the_three_names() {
        assert_eq!(priority("priority", None).ok(), Some(Priority::Default));
        assert_eq!(
            priority("priority", Some("batch")).ok(),
            Some(Priority::Batch)
        );
        let e = priority("priority", Some("urgent"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("priority: \"urgent\""), "{e}");
    }

    #[test]
    fn deadlines_read_as_the_mesh_reads_them_and_are_bounded() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let ms = |d: Duration| {
            json!(u64::try_from((now + d).duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap())
        };
        let left = deadline("deadline", &ms(Duration::from_secs(2)), now).unwrap();
        assert_eq!(left, Duration::from_secs(2));
        let rfc =
            json!(humantime::format_rfc3339_millis(now + Duration::from_millis(1500)).to_string());
        assert_eq!(
            deadline("deadline", &rfc, now).unwrap(),
            Duration::from_millis(1500)
        );
        let past = deadline("deadline", &json!(0), now).unwrap();
        assert_eq!(past, Duration::ZERO);
        for bad in [
            json!("tomorrow"),
            json!(-1),
            json!(true),
            ms(MAX_DEADLINE_AHEAD + Duration::from_secs(1)),
        ] {
            let e = deadline("calls[0].deadline", &bad, now)
                .unwrap_err()
                .to_string();
            assert!(e.contains("invalid_request: calls[0].deadline: "), "{e}");
        }
        assert_eq!(engine_deadline(10, Duration::ZERO), 9);
        assert_eq!(engine_deadline(10, Duration::from_nanos(5)), 15);
    }
}
