//! Publishing what a call came to: its result, and a dead letter when it cannot
//! succeed.
//!
//! Both go to JetStream and are confirmed before the call is acknowledged. A result
//! carries `Nats-Msg-Id: <call_id>` and a dead letter `Nats-Msg-Id: dlq-<stream
//! sequence of the call>`, so publishing either again (the call was delivered again
//! after a crash between publishing and acknowledging) stores it once within the
//! streams' duplicate window. The `reply_to` copy is plain NATS and may repeat.

use std::time::SystemTime;

use async_nats::jetstream::Context;
use async_nats::HeaderMap;
use bytes::Bytes;

use crate::delivery::Delivery;
use crate::envelope::{rfc3339, DeadLetter, DeadReason, MeshResult, Unreadable};
use crate::subject;

/// The header that names a dead letter's reason.
pub const REASON_HEADER: &str = "Toolgate-Reason";

/// Where results and dead letters go.
#[derive(Debug, Clone)]
pub(crate) struct Outbox {
    pub(crate) js: Context,
    pub(crate) client: async_nats::Client,
}

// === impl Outbox ===

impl Outbox {
    /// Publishes `result` (when its call id is known) and, with `dead`, a dead letter
    /// carrying `payload`.
    ///
    /// # Errors
    ///
    /// When the broker did not confirm either.
    pub(crate) async fn finish(
        &self,
        result: &MeshResult,
        known: &Unreadable,
        dead: Option<DeadReason>,
        payload: &[u8],
        delivery: Delivery,
    ) -> Result<(), String> {
        if !result.call_id.is_empty() {
            self.result(result, known.reply_to.as_deref()).await?;
        }
        if let Some(reason) = dead {
            self.dead_letter(result, known, reason, payload, delivery)
                .await?;
        }
        Ok(())
    }

    async fn result(&self, result: &MeshResult, reply_to: Option<&str>) -> Result<(), String> {
        let body = Bytes::from(serde_json::to_vec(result).map_err(|e| e.to_string())?);
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", result.call_id.as_str());
        self.confirm(subject::results(&result.call_id), headers, body.clone())
            .await?;
        if let Some(to) = reply_to {
            if let Err(e) = self.client.publish(to.to_string(), body).await {
                tracing::debug!(target: "toolgate::mesh", error = %e, "reply_to not sent (the result is in the results stream)");
            }
        }
        Ok(())
    }

    async fn dead_letter(
        &self,
        result: &MeshResult,
        known: &Unreadable,
        reason: DeadReason,
        payload: &[u8],
        delivery: Delivery,
    ) -> Result<(), String> {
        let letter = DeadLetter {
            reason: reason.as_str().into(),
            call_id: known.call_id.clone(),
            tool: known.tool.clone(),
            message: String::from_utf8_lossy(payload).into_owned(),
            error: result
                .error
                .clone()
                .unwrap_or_else(|| crate::envelope::ErrorBody::new(reason.as_str(), String::new())),
            attempts: result.attempts.clone(),
            delivered: delivery.number,
            at: rfc3339(SystemTime::now()),
        };
        let body = Bytes::from(serde_json::to_vec(&letter).map_err(|e| e.to_string())?);
        let mut headers = HeaderMap::new();
        headers.insert(REASON_HEADER, reason.as_str());
        if delivery.sequence > 0 {
            headers.insert("Nats-Msg-Id", format!("dlq-{}", delivery.sequence).as_str());
        }
        let tool = match reason {
            DeadReason::UnknownTool => None,
            _ => known.tool.as_deref(),
        };
        self.confirm(subject::dlq(tool), headers, body).await
    }

    async fn confirm(
        &self,
        subject: String,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<(), String> {
        self.js
            .publish_with_headers(subject.clone(), headers, body)
            .await
            .map_err(|e| format!("{subject}: {e}"))?
            .await
            .map(drop)
            .map_err(|e| format!("{subject}: {e}"))
    }
}
