//! The rule a config's `max_pause` must keep (see [`MAX_PAUSE_LIMIT`]): no upstream
//! may stop a tool for an unbounded time.

use std::time::Duration;

use crate::vocab::MAX_PAUSE_LIMIT;

/// `max_pause` must be at most [`MAX_PAUSE_LIMIT`]; `written` is how the config wrote
/// it, for the message.
pub(super) fn max_pause(d: Duration, written: &str) -> Result<Duration, String> {
    if d > MAX_PAUSE_LIMIT {
        return Err(format!(
            "{written:?}: must be at most {}h (upstream pauses must be bounded)",
            MAX_PAUSE_LIMIT.as_secs() / 3600
        ));
    }
    Ok(d)
}
