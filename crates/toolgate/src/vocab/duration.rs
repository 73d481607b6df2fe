//! Durations as configs write them: `"2s"`, `"150ms"`, `"1h 30m"`, and as messages
//! and rates print them back (`"1h30m"`).

use std::time::Duration;

/// Parses a duration such as `"2s"`, `"150ms"` or `"1h 30m"`.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| format!("{s:?}: not a duration ({e})"))
}

/// Formats a duration the way configs write it.
pub(crate) fn format_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string().replace(' ', "")
}
