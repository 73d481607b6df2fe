//! An upstream's transport, watched as messages arrive.
//!
//! rmcp hands each notification to its handler on a task of its own, while a
//! response goes straight to the request that waits for it; so a call's answer can
//! overtake the progress notifications the server sent before it. This transport
//! counts a relayed call's progress notifications in the order they arrive, before
//! rmcp sees them, so the call can wait until those were relayed
//! ([`Relay::settle`](crate::progress::Relay::settle)) before it answers.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use rmcp::model::{JsonRpcMessage, JsonRpcNotification, ServerNotification};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleClient;

use crate::progress::Relays;

/// A client transport that tells [`Relays`] of each progress notification it receives.
pub(crate) struct Ordered<T> {
    inner: T,
    server: Arc<str>,
    relays: Arc<Relays>,
}

// === impl Ordered ===

impl<T> Ordered<T> {
    /// Watches `inner`, the transport to `server`.
    pub(crate) fn new(inner: T, server: Arc<str>, relays: Arc<Relays>) -> Self {
        Self {
            inner,
            server,
            relays,
        }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Ordered<T> {
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await?;
        if let JsonRpcMessage::Notification(JsonRpcNotification {
            notification: ServerNotification::ProgressNotification(n),
            ..
        }) = &message
        {
            self.relays.arrived(&self.server, &n.params.progress_token);
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
