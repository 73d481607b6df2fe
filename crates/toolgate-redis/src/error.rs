//! Errors of the Redis store: connecting, configuring and talking to Redis.

use std::time::Duration;

/// Why the Redis store could not be set up or did not answer.
#[derive(Debug, thiserror::Error)]
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
    /// Redis answered with an error, or the connection failed.
    #[error("redis {op}: {source}")]
    Redis {
        /// The operation (`admit`, `release`, `connect`, `ping`).
        op: &'static str,
        /// The client's error.
        #[source]
        source: redis::RedisError,
    },
    /// Redis did not answer within the store's timeout.
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
