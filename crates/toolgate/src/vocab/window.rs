//! How a request rate is enforced: a token bucket or an exact sliding window
//! ([`Window`]).

/// How `rate` is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Window {
    /// Token bucket (GCRA): `burst` at once, refilled continuously.
    #[default]
    Bucket,
    /// Exact sliding-window log: at most N in any interval of length P.
    Sliding,
}
