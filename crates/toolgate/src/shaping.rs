//! Server-signal shaping: what an upstream's rate-limit headers say about its own
//! quota, so that a tool slows down *before* the upstream starts answering 429.
//!
//! [`server_limit`] reads the headers of a response:
//!
//! | header | meaning |
//! |---|---|
//! | `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` | the de-facto convention (GitHub, many APIs); `Reset` is delta-seconds, or a Unix time when it is larger than 10⁹ |
//! | `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` | early IETF drafts, separate fields, delta-seconds |
//! | `RateLimit: limit=100, remaining=5, reset=30` | IETF draft 7, one field |
//! | `RateLimit: "default";r=5;t=30` with `RateLimit-Policy: "default";q=100;w=60` | IETF drafts 8 and later (structured fields) |
//!
//! Feed the result to the permit with [`crate::Completion::server_limit`]. When the
//! remaining capacity is under 10 % of the limit, the engine spreads the remaining
//! calls evenly over the reset window: at most one call of the tool every
//! `reset / remaining`, until the window ends or a later response reports more room.
//! When nothing remains, the tool is paused until the reset, as with `Retry-After`.
//! Either way the window is cut to the tool's `max_pause`, and on a tool whose quotas
//! are per tenant only the reporting call's tenant is spread or paused.
//! Rejections while spreading name the quota `tools.<tool>.server_limit` with reason
//! `rate_limited` and the time of the next slot as `retry_after`.

use std::time::{Duration, SystemTime};

/// Under this share of its limit, an upstream's remaining capacity is spread over
/// its reset window (10 %).
pub const SPREAD_BELOW: f64 = 0.1;

/// What an upstream said about its own rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerLimit {
    /// Requests allowed per window, when the upstream said.
    pub limit: Option<u64>,
    /// Requests left in the current window.
    pub remaining: u64,
    /// Time until the window resets.
    pub reset: Duration,
}

impl ServerLimit {
    /// A server limit from its parts.
    pub const fn new(limit: Option<u64>, remaining: u64, reset: Duration) -> Self {
        Self {
            limit,
            remaining,
            reset,
        }
    }

    /// Whether the remaining capacity is low enough (under 10 % of a known limit)
    /// that calls must be spread over the reset window.
    pub fn is_low(&self) -> bool {
        match self.limit {
            Some(l) if l > 0 => (self.remaining as f64) < SPREAD_BELOW * l as f64,
            // Without a limit, only "nothing left" is known to be low.
            _ => self.remaining == 0,
        }
    }
}

/// Reads an upstream's rate-limit headers (names compared case-insensitively);
/// `None` when they say nothing usable (no remaining count, or no reset time).
/// Unparsable values are ignored.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use toolgate::shaping::server_limit;
///
/// let h = [("X-RateLimit-Limit", "100"), ("X-RateLimit-Remaining", "4"), ("X-RateLimit-Reset", "20")];
/// let s = server_limit(h, SystemTime::now()).unwrap();
/// assert_eq!((s.limit, s.remaining, s.reset), (Some(100), 4, Duration::from_secs(20)));
/// assert!(s.is_low());
///
/// let h = [("RateLimit", "\"default\";r=50;t=30"), ("RateLimit-Policy", "\"default\";q=100;w=60")];
/// let s = server_limit(h, SystemTime::now()).unwrap();
/// assert_eq!((s.limit, s.remaining, s.reset), (Some(100), 50, Duration::from_secs(30)));
/// assert!(!s.is_low());
/// ```
pub fn server_limit<'a, I>(headers: I, now: SystemTime) -> Option<ServerLimit>
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    let (mut limit, mut remaining, mut reset) = (None, None, None);
    let (mut policy_limit, mut policy_window) = (None, None);
    for (name, value) in headers {
        let value = value.trim();
        let name = name.trim();
        let is = |n: &str| name.eq_ignore_ascii_case(n);
        if is("x-ratelimit-limit") || is("ratelimit-limit") {
            limit = limit.or_else(|| first_number(value));
        } else if is("x-ratelimit-remaining") || is("ratelimit-remaining") {
            remaining = remaining.or_else(|| first_number(value));
        } else if is("x-ratelimit-reset") {
            reset = reset.or_else(|| reset_of(value, now));
        } else if is("ratelimit-reset") {
            reset = reset.or_else(|| first_number(value).map(Duration::from_secs));
        } else if is("ratelimit") {
            let p = params(value);
            remaining = remaining.or(p.get("r").or(p.get("remaining")));
            reset = reset.or(p.get("t").or(p.get("reset")).map(Duration::from_secs));
            limit = limit.or(p.get("limit"));
        } else if is("ratelimit-policy") {
            let p = params(value);
            policy_limit = policy_limit.or(p.get("q"));
            policy_window = policy_window.or(p.get("w").map(Duration::from_secs));
        }
    }
    let remaining = remaining?;
    let reset = reset.or(policy_window)?;
    Some(ServerLimit {
        limit: limit.or(policy_limit),
        remaining,
        reset,
    })
}

/// `X-RateLimit-Reset`: delta-seconds, or a Unix time (seconds) when larger than
/// 10⁹ (no window is 30 years long; GitHub and others send Unix times).
fn reset_of(value: &str, now: SystemTime) -> Option<Duration> {
    let n = first_number(value)?;
    if n > 1_000_000_000 {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(n);
        Some(at.duration_since(now).unwrap_or(Duration::ZERO))
    } else {
        Some(Duration::from_secs(n))
    }
}

/// The leading whole number of a field value (`"12"`, `"12, 100;w=60"`).
fn first_number(value: &str) -> Option<u64> {
    let digits: &str = value
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .filter(|d| !d.is_empty())?;
    digits.parse().ok()
}

/// `key=number` parameters of a field (`limit=100, remaining=5` or
/// `"default";r=5;t=30`), first occurrence of each key wins.
struct Params(Vec<(String, u64)>);

fn params(value: &str) -> Params {
    let mut out: Vec<(String, u64)> = Vec::new();
    for part in value.split([',', ';']) {
        let Some((k, v)) = part.split_once('=') else {
            continue;
        };
        let k = k.trim().to_ascii_lowercase();
        if out.iter().any(|(seen, _)| *seen == k) {
            continue;
        }
        if let Some(n) = first_number(v) {
            out.push((k, n));
        }
    }
    Params(out)
}

impl Params {
    fn get(&self, key: &str) -> Option<u64> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    type Case<'a> = (&'a [(&'a str, &'a str)], Option<(Option<u64>, u64, u64)>);

    // Over 60 lines: one table of header sets and what each reads as.
    #[test]
    fn every_header_convention_is_read() {
        let now = at(1_700_000_000);
        let cases: &[Case<'_>] = &[
            (
                &[
                    ("x-ratelimit-limit", "60"),
                    ("X-RATELIMIT-REMAINING", "3"),
                    ("X-RateLimit-Reset", "1700000030"),
                ],
                Some((Some(60), 3, 30)),
            ),
            (
                &[
                    ("RateLimit-Limit", "10"),
                    ("RateLimit-Remaining", "0"),
                    ("RateLimit-Reset", "7"),
                ],
                Some((Some(10), 0, 7)),
            ),
            (
                &[("RateLimit", "limit=100, remaining=9, reset=12")],
                Some((Some(100), 9, 12)),
            ),
            (
                &[
                    ("RateLimit", "\"d\";r=2;t=5"),
                    ("RateLimit-Policy", "\"d\";q=50;w=60"),
                ],
                Some((Some(50), 2, 5)),
            ),
            // The window from the policy when the field has no reset.
            (
                &[
                    ("RateLimit", "\"d\";r=2"),
                    ("RateLimit-Policy", "\"d\";q=50;w=60"),
                ],
                Some((Some(50), 2, 60)),
            ),
            // A Unix reset time already past: the window has reset.
            (
                &[
                    ("X-RateLimit-Remaining", "1"),
                    ("X-RateLimit-Reset", "1600000000"),
                ],
                Some((None, 1, 0)),
            ),
            // Nothing usable.
            (
                &[
                    ("X-RateLimit-Remaining", "lots"),
                    ("X-RateLimit-Reset", "5"),
                ],
                None,
            ),
            (&[("X-RateLimit-Remaining", "5")], None),
            (&[("Content-Type", "application/json")], None),
        ];
        for (headers, want) in cases {
            let got = server_limit(headers.iter().copied(), now)
                .map(|s| (s.limit, s.remaining, s.reset.as_secs()));
            assert_eq!(got, *want, "{headers:?}");
        }
    }

    #[test]
    fn low_means_under_a_tenth_of_the_limit_or_nothing_left() {
        let s = |limit, remaining| ServerLimit::new(limit, remaining, Duration::from_secs(1));
        assert!(s(Some(100), 9).is_low());
        assert!(!s(Some(100), 10).is_low());
        assert!(s(Some(5), 0).is_low());
        assert!(!s(None, 1).is_low());
        assert!(s(None, 0).is_low());
    }
}
