//! `Retry-After` (RFC 9110 §10.2.3): delta-seconds or an HTTP-date.

use std::time::{Duration, SystemTime};

/// How long a `Retry-After` value asks the client to wait, as of `now` (wall clock,
/// needed only for the HTTP-date form). Unparsable values give `None` and are to be
/// ignored; a date in the past gives zero.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use toolgate::retry::retry_after;
///
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
/// assert_eq!(retry_after("120", now), Some(Duration::from_secs(120)));
/// assert_eq!(retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now), Some(Duration::from_secs(10)));
/// assert_eq!(retry_after("soon", now), None);
/// ```
pub fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse::<u64>().ok().map(Duration::from_secs);
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epoch(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn both_formats_and_garbage() {
        let now = epoch(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        let cases = [
            ("0", Some(0)),
            ("  7 ", Some(7)),
            ("Sun, 06 Nov 1994 08:49:47 GMT", Some(10)),
            ("Sunday, 06-Nov-94 08:49:47 GMT", Some(10)),
            ("Sun Nov  6 08:49:47 1994", Some(10)),
            ("Sun, 06 Nov 1994 08:49:27 GMT", Some(0)),
            ("-5", None),
            ("1.5", None),
            ("", None),
            ("99999999999999999999999", None),
            ("tomorrow", None),
        ];
        for (v, want) in cases {
            assert_eq!(retry_after(v, now), want.map(Duration::from_secs), "{v:?}");
        }
    }
}
