//! Errors of the Redis store: connecting, configuring and talking to Redis.

use std::time::Duration;

/// Why the Redis store could not be set up or did not answer.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The `[store]` section cannot be used with Redis.
    #[error("store.{key}: {message}")]
    Config {
        /// The offending key of `[store]`.
        key: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// A quota cannot be represented exactly in Redis' Lua numbers (doubles).
    #[error("{path}: {message}")]
    Precision {
        /// The quota's config path, e.g. `tools.x.tokens`.
        path: String,
        /// Which limit is exceeded.
        message: String,
    },
    /// Redis answered with an error, or the connection failed (a time-out, whichever
    /// timer noticed it, is [`StoreError::Timeout`] instead).
    #[error("redis {op}: {source}")]
    Redis {
        /// The operation (`admit`, `release`, `connect`, `ping`).
        op: &'static str,
        /// The client's error.
        #[source]
        source: redis::RedisError,
    },
    /// Redis did not answer within the store's timeout: the gate's own timer or the
    /// client's connection or response timeout ran out.
    #[error("redis {op}: no answer within {}ms", .timeout.as_millis())]
    Timeout {
        /// The operation.
        op: &'static str,
        /// The timeout that ran out.
        timeout: Duration,
    },
    /// Redis answered something the script never returns.
    #[error("redis {op}: unexpected reply {reply}")]
    Reply {
        /// The operation.
        op: &'static str,
        /// The reply, as debug text.
        reply: String,
    },
}

// === impl StoreError ===

impl StoreError {
    /// The error of a failed Redis operation: a time-out of the client (its
    /// connection or response timeout, which may run out just before the gate's own
    /// timer) is a [`StoreError::Timeout`] like one of the gate, so that logs and the
    /// `kind` label name it alike.
    pub(crate) fn redis(op: &'static str, source: redis::RedisError, timeout: Duration) -> Self {
        if timed_out(&source) {
            Self::Timeout { op, timeout }
        } else {
            Self::Redis { op, source }
        }
    }

    /// A short, stable label for metrics: `config`, `precision`, `redis`, `timeout`, `reply`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Config { .. } => "config",
            Self::Precision { .. } => "precision",
            Self::Redis { .. } => "redis",
            Self::Timeout { .. } => "timeout",
            Self::Reply { .. } => "reply",
        }
    }
}

/// Whether the client gave up waiting: its I/O timed out, or (the cluster client,
/// whose failed first connection keeps its cause as text only) it says so.
fn timed_out(e: &redis::RedisError) -> bool {
    if e.is_timeout() {
        return true;
    }
    let cause = std::io::Error::from(std::io::ErrorKind::TimedOut).to_string();
    e.kind() == redis::ErrorKind::Io && e.detail() == Some(cause.as_str())
}
