//! The bounds a config's durations must keep: waits, and the pauses an upstream can
//! impose. Both are there so that no caller and no upstream can hold a call, or a
//! tool, for an unbounded time.

use std::time::Duration;

/// The longest `max_wait` accepted: waits must be bounded.
pub const MAX_WAIT_LIMIT: Duration = Duration::from_secs(3600);

/// The default `max_pause`: the longest pause (or spreading window) an upstream's
/// `Retry-After` or rate-limit headers can impose on a tool.
pub const DEFAULT_MAX_PAUSE: Duration = Duration::from_secs(300);

/// The longest `max_pause` accepted: no upstream may stop a tool for longer than a
/// day, whatever it asks for.
pub const MAX_PAUSE_LIMIT: Duration = Duration::from_secs(24 * 3600);

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
