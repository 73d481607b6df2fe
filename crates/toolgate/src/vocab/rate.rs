//! A rate: `count` requests (or tokens) per `period`, as configs write it (`"N/P"`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::duration::{format_duration, parse_duration};

/// The largest request or token count a rate or burst may use (2^53), which keeps the
/// engine's exact integer arithmetic far from overflow.
pub const MAX_COUNT: u64 = 1 << 53;

/// `count` requests (or tokens) per `period`, written `"N/P"`: `"2/s"`, `"100/min"`,
/// `"40000/min"`, `"1/7d"`, `"5/10s"`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use toolgate::config::Rate;
///
/// let r: Rate = "100/min".parse().unwrap();
/// assert_eq!((r.count(), r.period()), (100, Duration::from_secs(60)));
/// assert_eq!(
///     "0/s".parse::<Rate>().unwrap_err(),
///     "\"0/s\": the request count must be at least 1"
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u64,
    period: Duration,
}

// === impl Rate ===

impl Rate {
    /// `count` per `period`.
    ///
    /// # Errors
    ///
    /// When `count` is 0 or above [`MAX_COUNT`], or `period` is zero or longer than
    /// `u64::MAX` nanoseconds.
    pub fn try_new(count: u64, period: Duration) -> Result<Self, String> {
        Self::check(count, period, "request")
    }

    /// `count` per second.
    ///
    /// # Errors
    ///
    /// As [`Rate::try_new`].
    pub fn per_second(count: u64) -> Result<Self, String> {
        Self::try_new(count, Duration::from_secs(1))
    }

    fn check(count: u64, period: Duration, what: &str) -> Result<Self, String> {
        if count == 0 {
            return Err(format!("the {what} count must be at least 1"));
        }
        if count > MAX_COUNT {
            return Err(format!("the {what} count must be at most {MAX_COUNT}"));
        }
        if period.is_zero() {
            return Err("the period must be longer than zero".into());
        }
        if period.as_nanos() > u128::from(u64::MAX) {
            return Err("the period must be at most 584 years".into());
        }
        Ok(Self { count, period })
    }

    /// Parses `"N/P"`, naming the counted thing (`request` or `token`) in errors.
    pub(crate) fn parse_as(s: &str, what: &str) -> Result<Self, String> {
        let fail = |msg: String| format!("{s:?}: {msg}");
        let (n, p) = s
            .split_once('/')
            .ok_or_else(|| fail("expected \"N/P\", e.g. \"2/s\" or \"100/min\"".into()))?;
        let n = n.trim();
        let count = if n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty() {
            n.parse::<u64>()
                .map_err(|_| fail(format!("the {what} count must be at most {MAX_COUNT}")))?
        } else {
            return Err(fail(format!(
                "the {what} count must be a whole number, got {n:?}"
            )));
        };
        let period = parse_period(p.trim()).map_err(fail)?;
        Self::check(count, period, what).map_err(fail)
    }

    /// Requests (or tokens) per period.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    pub(crate) fn period_ns(&self) -> u64 {
        crate::clock::nanos(self.period)
    }
}

impl FromStr for Rate {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse_as(s, "request")
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.period;
        let unit = match p.as_secs() {
            1 if p.subsec_nanos() == 0 => "s".to_string(),
            60 if p.subsec_nanos() == 0 => "min".to_string(),
            3600 if p.subsec_nanos() == 0 => "h".to_string(),
            86400 if p.subsec_nanos() == 0 => "d".to_string(),
            _ => format_duration(p),
        };
        write!(f, "{}/{}", self.count, unit)
    }
}

fn parse_period(p: &str) -> Result<Duration, String> {
    let unit = match p {
        "ns" => Some(Duration::from_nanos(1)),
        "us" | "µs" => Some(Duration::from_micros(1)),
        "ms" => Some(Duration::from_millis(1)),
        "s" | "sec" | "second" => Some(Duration::from_secs(1)),
        "m" | "min" | "minute" => Some(Duration::from_secs(60)),
        "h" | "hour" => Some(Duration::from_secs(3600)),
        "d" | "day" => Some(Duration::from_secs(86_400)),
        _ => None,
    };
    match unit {
        Some(d) => Ok(d),
        None => parse_duration(p).map_err(|_| {
            format!("the period {p:?} is not a unit (s, min, h, d) or a duration such as \"10s\"")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_units_and_durations() {
        let cases = [
            ("2/s", 2, 1_000),
            ("100/min", 100, 60_000),
            ("5/10s", 5, 10_000),
            ("1/7d", 1, 7 * 86_400_000),
            ("40000/min", 40_000, 60_000),
            ("3/1h", 3, 3_600_000),
        ];
        for (s, n, ms) in cases {
            let r: Rate = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(r.count(), n, "{s}");
            assert_eq!(r.period(), Duration::from_millis(ms), "{s}");
        }
    }

    #[test]
    fn bad_rates_say_what_is_wrong() {
        let cases = [
            ("0/s", "\"0/s\": the request count must be at least 1"),
            ("-1/s", "\"-1/s\": the request count must be a whole number, got \"-1\""),
            ("1.5/s", "\"1.5/s\": the request count must be a whole number, got \"1.5\""),
            ("2", "\"2\": expected \"N/P\", e.g. \"2/s\" or \"100/min\""),
            ("2/0s", "\"2/0s\": the period must be longer than zero"),
            ("99999999999999999999999/s", "\"99999999999999999999999/s\": the request count must be at most 9007199254740992"),
            ("2/fortnight", "\"2/fortnight\": the period \"fortnight\" is not a unit (s, min, h, d) or a duration such as \"10s\""),
        ];
        for (s, want) in cases {
            assert_eq!(s.parse::<Rate>().unwrap_err(), want);
        }
    }

    #[test]
    fn rates_display_as_written() {
        for s in ["2/s", "100/min", "1/h", "5/10s"] {
            assert_eq!(s.parse::<Rate>().map(|r| r.to_string()), Ok(s.to_string()));
        }
    }
}
