//! The connection to Redis (one server, or a cluster), with the per-call timeout,
//! reconnection and the store's metrics.
//!
//! A single server is reached through the `redis` crate's `ConnectionManager`: one
//! multiplexed connection shared by every caller of the process, re-established in
//! the background with exponential backoff when it breaks. A cluster (a comma-separated
//! list of `redis://` URLs, or one URL with `?cluster=true`) uses the crate's async
//! cluster connection. Every operation is bounded by the store's `timeout`, by one
//! timer of ours: the single server's client has no response timeout of its own (it
//! would be a second timer per round trip, of the same length; a timeout there never
//! reconnects, so it adds nothing).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{ScriptInvocation, Value};

use crate::error::StoreError;
use crate::latency::{count_error, Latency, Timed};

/// A connection to one server or a cluster, with the store's latency histograms.
/// Cheap to clone.
#[derive(Clone)]
pub(crate) struct Conn {
    client: Client,
    latency: Arc<Latency>,
}

/// The client of one server or of a cluster.
#[derive(Clone)]
enum Client {
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
        let client = Self::client(url, timeout).await?;
        Ok(Self {
            client,
            latency: Arc::new(Latency::new()),
        })
    }

    async fn client(url: &str, timeout: Duration) -> Result<Client, StoreError> {
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
            return Ok(Client::Cluster(conn));
        }
        let redis_err = |source| StoreError::redis(op, source, timeout);
        let client = redis::Client::open(urls[0].as_str()).map_err(redis_err)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(None)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(200))
            .set_number_of_retries(2);
        let conn = ConnectionManager::new_lazy_with_config(client, config).map_err(redis_err)?;
        Ok(Client::Single(conn))
    }

    /// Another connection to the same server as this one (connected lazily, on the
    /// runtime of its first call), recording into this one's latency histograms.
    ///
    /// # Errors
    ///
    /// When the URL cannot be parsed.
    pub(crate) async fn beside(&self, url: &str, timeout: Duration) -> Result<Self, StoreError> {
        let client = Self::client(url, timeout).await?;
        Ok(Self {
            client,
            latency: self.latency.clone(),
        })
    }

    /// Starts timing `op` for the store's metrics.
    pub(crate) fn timed(&self, op: &'static str) -> Timed<'_> {
        self.latency.start(op)
    }

    /// Runs a script invocation (EVALSHA, loading the script on NOSCRIPT) within
    /// `timeout`, recording latency and errors.
    pub(crate) async fn invoke(
        &self,
        op: &'static str,
        inv: &ScriptInvocation<'_>,
        timeout: Duration,
    ) -> Result<Value, StoreError> {
        let timed = self.timed(op);
        let result =
            match tokio::time::timeout(timeout, self.invoke_unbounded(op, inv, timeout)).await {
                Ok(result) => result,
                Err(_) => Err(StoreError::Timeout { op, timeout }),
            };
        timed.done(result.as_ref().err());
        result
    }

    /// As [`Conn::invoke`], without a bound of its own (its caller keeps the store's
    /// `timeout`, which the error names) and recording nothing: for a round trip on
    /// behalf of several callers, each of which records its own
    /// ([`crate::latency::Timed`]).
    pub(crate) async fn invoke_unbounded(
        &self,
        op: &'static str,
        inv: &ScriptInvocation<'_>,
        timeout: Duration,
    ) -> Result<Value, StoreError> {
        let mut client = self.client.clone();
        let result = match &mut client {
            Client::Single(c) => inv.invoke_async(c).await,
            Client::Cluster(c) => inv.invoke_async(c).await,
        };
        result.map_err(|source| StoreError::redis(op, source, timeout))
    }

    /// `PING` within `timeout`.
    pub(crate) async fn ping(&self, timeout: Duration) -> Result<(), StoreError> {
        let op = "ping";
        let timed = self.timed(op);
        let mut client = self.client.clone();
        let cmd = redis::cmd("PING");
        let fut = async {
            match &mut client {
                Client::Single(c) => cmd.query_async::<Value>(c).await,
                Client::Cluster(c) => cmd.query_async::<Value>(c).await,
            }
        };
        let result = match tokio::time::timeout(timeout, fut).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(source)) => Err(StoreError::redis(op, source, timeout)),
            Err(_) => Err(StoreError::Timeout { op, timeout }),
        };
        timed.done(result.as_ref().err());
        result
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.client, Client::Cluster(_))
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
