//! The publishing side: send one call and, if asked, wait for its result — what
//! `toolgate call --mesh` does, and what an agent's own code does with any NATS
//! client.

use std::time::Duration;

use async_nats::jetstream::consumer::pull::Config;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy};
use async_nats::jetstream::Context;
use async_nats::HeaderMap;
use bytes::Bytes;
use futures_util::StreamExt;

use crate::config::MeshConfig;
use crate::envelope::MeshResult;
use crate::subject;

/// A connection for publishing calls.
#[derive(Debug, Clone)]
pub struct Caller {
    js: Context,
    results_stream: String,
}

/// A call as published: its JSON envelope, with `call_id` and `tool`.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The call id (also the `Nats-Msg-Id`).
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The whole envelope.
    pub envelope: serde_json::Value,
}

// === impl Caller ===

impl Caller {
    /// Connects to the mesh's broker, waiting up to the config's `connect_timeout`.
    ///
    /// # Errors
    ///
    /// When NATS cannot be reached in time, or the credentials cannot be read.
    pub async fn connect(config: &MeshConfig, url: Option<&str>) -> Result<Self, String> {
        let client = crate::connect::client(config, url).await?;
        let deadline = tokio::time::Instant::now() + config.connect_timeout;
        while client.connection_state() != async_nats::connection::State::Connected {
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "cannot reach NATS at {} within {}",
                    crate::config::redact(url.or(config.url.as_deref()).unwrap_or_default()),
                    humantime::format_duration(config.connect_timeout)
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Self {
            js: async_nats::jetstream::new(client),
            results_stream: config.results_stream.clone(),
        })
    }

    /// Publishes a call on `toolgate.calls.<tool>` with `Nats-Msg-Id: <call_id>`;
    /// returns its sequence in the calls stream.
    ///
    /// # Errors
    ///
    /// When the broker does not confirm it (no stream on the subject: is a gateway
    /// with the mesh running?).
    pub async fn publish(&self, call: &Outgoing) -> Result<u64, String> {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", call.call_id.as_str());
        let body = Bytes::from(serde_json::to_vec(&call.envelope).map_err(|e| e.to_string())?);
        let ack = self
            .js
            .publish_with_headers(subject::calls(&call.tool), headers, body)
            .await
            .map_err(|e| format!("publish: {e}"))?
            .await
            .map_err(|e| format!("publish not confirmed (is the calls stream there?): {e}"))?;
        Ok(ack.sequence)
    }

    /// Waits up to `timeout` for the result of `call_id` (it may already be stored).
    ///
    /// # Errors
    ///
    /// When no result arrives in time, or the results stream cannot be read.
    pub async fn result(&self, call_id: &str, timeout: Duration) -> Result<MeshResult, String> {
        let stream = self
            .js
            .get_stream(&self.results_stream)
            .await
            .map_err(|e| format!("results stream {}: {e}", self.results_stream))?;
        let consumer = stream
            .create_consumer(Config {
                filter_subject: subject::results(call_id),
                deliver_policy: DeliverPolicy::All,
                ack_policy: AckPolicy::None,
                inactive_threshold: Duration::from_secs(30),
                ..Config::default()
            })
            .await
            .map_err(|e| format!("results stream: {e}"))?;
        let mut batch = consumer
            .batch()
            .max_messages(1)
            .expires(timeout)
            .messages()
            .await
            .map_err(|e| format!("results stream: {e}"))?;
        match batch.next().await {
            Some(Ok(m)) => serde_json::from_slice(&m.payload)
                .map_err(|e| format!("result of {call_id}: not a result: {e}")),
            Some(Err(e)) => Err(format!("results stream: {e}")),
            None => Err(format!(
                "no result for call {call_id} within {}",
                humantime::format_duration(timeout)
            )),
        }
    }
}
