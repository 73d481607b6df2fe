//! What may follow an attempt: success, a retry (after the server's time or after a
//! backoff), or the end.

use std::time::Duration;

/// How one attempt ended, as seen by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Attempt {
    /// The HTTP status, if a response came back.
    pub status: Option<u16>,
    /// The connection failed or the attempt timed out (no response).
    pub transport_error: bool,
    /// The response's `Retry-After`, already parsed.
    pub retry_after: Option<Duration>,
    /// The response failed the schema or semantic check.
    pub invalid: bool,
}

/// What may follow an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Class {
    /// The call succeeded.
    Success,
    /// Retryable, not before this long (the server said so: 429 or 503 with
    /// `Retry-After`).
    RetryAfter(Duration),
    /// Retryable after a backoff (5xx, 429/503 without `Retry-After`, connection
    /// errors, timeouts).
    Backoff,
    /// Not retryable (other 4xx, invalid output).
    Terminal,
}

/// Classifies an attempt.
///
/// | result | class |
/// |---|---|
/// | 1xx–3xx, output valid | `Success` |
/// | output invalid | `Terminal` |
/// | 429 or 503 with `Retry-After` | `RetryAfter` |
/// | 429 or 503 without, other 5xx, connection error, timeout | `Backoff` |
/// | other 4xx | `Terminal` |
pub fn classify(a: &Attempt) -> Class {
    if a.invalid {
        return Class::Terminal;
    }
    match a.status {
        None if a.transport_error => Class::Backoff,
        None => Class::Success,
        Some(429 | 503) => a.retry_after.map_or(Class::Backoff, Class::RetryAfter),
        Some(s) if s >= 500 => Class::Backoff,
        Some(s) if s >= 400 => Class::Terminal,
        Some(_) => Class::Success,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_classification_table() {
        let ra = Some(Duration::from_secs(2));
        let at = |status, retry_after| Attempt {
            status: Some(status),
            retry_after,
            ..Attempt::default()
        };
        assert_eq!(classify(&at(200, None)), Class::Success);
        assert_eq!(classify(&at(304, None)), Class::Success);
        assert_eq!(
            classify(&at(429, ra)),
            Class::RetryAfter(Duration::from_secs(2))
        );
        assert_eq!(
            classify(&at(503, ra)),
            Class::RetryAfter(Duration::from_secs(2))
        );
        assert_eq!(classify(&at(429, None)), Class::Backoff);
        assert_eq!(classify(&at(500, ra)), Class::Backoff);
        assert_eq!(classify(&at(502, None)), Class::Backoff);
        assert_eq!(classify(&at(400, None)), Class::Terminal);
        assert_eq!(classify(&at(404, ra)), Class::Terminal);
        let transport = Attempt {
            transport_error: true,
            ..Attempt::default()
        };
        assert_eq!(classify(&transport), Class::Backoff);
        let invalid = Attempt {
            invalid: true,
            ..at(200, None)
        };
        assert_eq!(classify(&invalid), Class::Terminal);
    }
}
