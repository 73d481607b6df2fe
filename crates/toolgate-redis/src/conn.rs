//! The connection to Redis (one server, or a cluster), with the per-call timeout,
//! reconnection and the store's metrics.
//!
//! A single server is reached through the `redis` crate's `ConnectionManager`: one
//! multiplexed connection shared by every caller of the process, re-established in
//! the background with exponential backoff when it breaks. A cluster (a comma-separated
//! list of `redis://` URLs, or one URL with `?cluster=true`) uses the crate's async
//! cluster connection. Every operation is bounded by the store's `timeout`.

#![allow(
    clippy::disallowed_methods,
    reason = "a Redis round trip's latency (a metric) is measured on the real clock"
)]

use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{ScriptInvocation, Value};

use crate::error::StoreError;

/// A connection to one server or a cluster. Cheap to clone.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

// === impl Conn ===

impl Conn {
    /// Connects to `url` (see the module doc), never waiting longer than `timeout` per
    /// attempt. A single server is connected lazily: the store starts even when
    /// Redis is down, and the first calls take the `on_store_error` path. A failure
    /// is counted in `toolgate_store_errors_total{op="connect"}`.
    pub(crate) async fn connect(url: &str, timeout: Duration) -> Result<Self, StoreError> {
        let result = Self::open(url, timeout).await;
        if let Err(e) = &result {
            count_error("connect", e);
        }
        result
    }

    async fn open(url: &str, timeout: Duration) -> Result<Self, StoreError> {
        let (urls, cluster) = parse_url(url);
        let op = "connect";
        if cluster {
            let timeout = timeout.max(Duration::from_millis(500));
            let redis_err = |source| StoreError::redis(op, source, timeout);
            let client = ClusterClientBuilder::new(urls)
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .retries(2)
                .build()
                .map_err(redis_err)?;
            let conn = client.get_async_connection().await.map_err(redis_err)?;
            return Ok(Self::Cluster(conn));
        }
        let redis_err = |source| StoreError::redis(op, source, timeout);
        let client = redis::Client::open(urls[0].as_str()).map_err(redis_err)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(200))
            .set_number_of_retries(2);
        let conn = ConnectionManager::new_lazy_with_config(client, config).map_err(redis_err)?;
        Ok(Self::Single(conn))
    }

    /// Runs a script invocation (EVALSHA, loading the script on NOSCRIPT) within
    /// `timeout`, recording latency and errors.
    pub(crate) async fn invoke(
        &self,
        op: &'static str,
        inv: &ScriptInvocation<'_>,
        timeout: Duration,
    ) -> Result<Value, StoreError> {
        let timed = Timed::start(op);
        let result = self.invoke_unrecorded(op, inv, timeout).await;
        timed.done(result.as_ref().err());
        result
    }

    /// As [`Conn::invoke`], but records nothing: for a round trip on behalf of
    /// several callers, each of which records its own ([`Timed`]).
    pub(crate) async fn invoke_unrecorded(
        &self,
        op: &'static str,
        inv: &ScriptInvocation<'_>,
        timeout: Duration,
    ) -> Result<Value, StoreError> {
        let mut conn = self.clone();
        let fut = async {
            match &mut conn {
                Self::Single(c) => inv.invoke_async(c).await,
                Self::Cluster(c) => inv.invoke_async(c).await,
            }
        };
        match tokio::time::timeout(timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(source)) => Err(StoreError::redis(op, source, timeout)),
            Err(_) => Err(StoreError::Timeout { op, timeout }),
        }
    }

    /// `PING` within `timeout`.
    pub(crate) async fn ping(&self, timeout: Duration) -> Result<(), StoreError> {
        let op = "ping";
        let start = Instant::now();
        let mut conn = self.clone();
        let cmd = redis::cmd("PING");
        let fut = async {
            match &mut conn {
                Self::Single(c) => cmd.query_async::<Value>(c).await,
                Self::Cluster(c) => cmd.query_async::<Value>(c).await,
            }
        };
        let result = match tokio::time::timeout(timeout, fut).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(source)) => Err(StoreError::redis(op, source, timeout)),
            Err(_) => Err(StoreError::Timeout { op, timeout }),
        };
        record(op, start, result.as_ref().err());
        result
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_cluster() {
            "Conn::Cluster"
        } else {
            "Conn::Single"
        })
    }
}

/// The node URLs of `url` and whether it names a cluster.
fn parse_url(url: &str) -> (Vec<String>, bool) {
    let mut cluster = false;
    let urls: Vec<String> = url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| {
            for flag in ["?cluster=true", "&cluster=true"] {
                if let Some(stripped) = u.strip_suffix(flag) {
                    cluster = true;
                    return stripped.to_string();
                }
            }
            u.to_string()
        })
        .collect();
    let cluster = cluster || urls.len() > 1;
    (urls, cluster)
}

/// A Redis operation being timed for the store's metrics, from [`Timed::start`] to
/// [`Timed::done`] (one latency sample, and the error if any).
pub(crate) struct Timed {
    op: &'static str,
    start: Instant,
}

impl Timed {
    pub(crate) fn start(op: &'static str) -> Self {
        Self {
            op,
            start: Instant::now(),
        }
    }

    pub(crate) fn done(self, err: Option<&StoreError>) {
        record(self.op, self.start, err);
    }
}

fn record(op: &'static str, start: Instant, err: Option<&StoreError>) {
    metrics::histogram!("toolgate_store_latency_seconds", "op" => op)
        .record(start.elapsed().as_secs_f64());
    if let Some(e) = err {
        count_error(op, e);
    }
}

fn count_error(op: &'static str, e: &StoreError) {
    metrics::counter!("toolgate_store_errors_total", "op" => op, "kind" => e.kind()).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_or_a_flag_selects_cluster_mode() {
        assert_eq!(
            parse_url("redis://a:1"),
            (vec!["redis://a:1".to_string()], false)
        );
        assert_eq!(
            parse_url("redis://a:1?cluster=true"),
            (vec!["redis://a:1".to_string()], true)
        );
        assert_eq!(
            parse_url("redis://a:1, redis://b:2"),
            (
                vec!["redis://a:1".to_string(), "redis://b:2".to_string()],
                true
            )
        );
    }
}
