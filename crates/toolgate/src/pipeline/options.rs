//! What a run of the pipeline is given ([`RunOptions`]) and what it tells each
//! attempt ([`AttemptCtx`]).

use std::time::Duration;

/// Options of one [`Engine::run`](crate::Engine::run).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use toolgate::RunOptions;
///
/// let opts = RunOptions::new()
///     .idempotency_key("order-42")
///     .deadline(Duration::from_secs(5));
/// assert_eq!(opts.idempotency_key_value(), Some("order-42"));
/// ```
#[derive(Debug, Clone, Copy, Default)]
#[must_use = "options do nothing until passed to `Engine::run`"]
pub struct RunOptions<'k> {
    pub(super) idempotency_key: Option<&'k str>,
    pub(super) deadline: Option<Duration>,
    pub(super) jitter: Option<fn() -> f64>,
}

impl<'k> RunOptions<'k> {
    /// No key, the tool's deadline, random jitter.
    pub const fn new() -> Self {
        Self {
            idempotency_key: None,
            deadline: None,
            jitter: None,
        }
    }

    /// The call's idempotency key: makes a call to a tool that is not marked
    /// `idempotent` retryable, and is handed to every attempt (send it as
    /// `Idempotency-Key`).
    pub const fn idempotency_key(mut self, key: &'k str) -> Self {
        self.idempotency_key = Some(key);
        self
    }

    /// Sets the key from an option.
    pub const fn with_idempotency_key(mut self, key: Option<&'k str>) -> Self {
        self.idempotency_key = key;
        self
    }

    /// Bounds the whole call, every admission, attempt and delay included. Replaces
    /// the tool's `[tools.X.retry] deadline`; without either there is no bound.
    pub const fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The source of the backoff's full jitter: values in `[0, 1)` (default: a
    /// process-wide random source). `|| 1.0` makes every backoff its ceiling, for
    /// deterministic tests.
    pub const fn jitter(mut self, uniform: fn() -> f64) -> Self {
        self.jitter = Some(uniform);
        self
    }

    /// The idempotency key, if any.
    pub const fn idempotency_key_value(&self) -> Option<&'k str> {
        self.idempotency_key
    }
}

/// What the closure of [`Engine::run`](crate::Engine::run) is told about the attempt it performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptCtx<'k> {
    pub(super) number: u32,
    pub(super) idempotency_key: Option<&'k str>,
    pub(super) remaining: Option<Duration>,
    pub(super) waited: Duration,
}

impl<'k> AttemptCtx<'k> {
    /// The attempt's number: 1 for the first.
    pub const fn number(&self) -> u32 {
        self.number
    }

    /// The call's idempotency key, the same on every attempt.
    pub const fn idempotency_key(&self) -> Option<&'k str> {
        self.idempotency_key
    }

    /// The time left until the call's deadline, if it has one: a good per-attempt
    /// timeout for the transport (the pipeline cuts the attempt then anyway).
    pub const fn remaining(&self) -> Option<Duration> {
        self.remaining
    }

    /// How long this attempt waited for admission.
    pub const fn waited(&self) -> Duration {
        self.waited
    }
}
