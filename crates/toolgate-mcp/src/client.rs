//! toolgate as the client of an upstream server: what it does with the upstream's
//! notifications. Progress is relayed to the client that asked for it; a changed
//! tool list is read again and handed to the connection's supervisor (latest list
//! wins), which rebuilds the catalog and announces it downstream.

use std::sync::Arc;

use rmcp::model::{ProgressNotificationParam, Tool};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};
use tokio::sync::watch;

use crate::ordered::Ordered;
use crate::progress::Relays;

/// The client side of one upstream connection.
#[derive(Debug, Clone)]
pub struct UpstreamClient {
    server: Arc<str>,
    relays: Arc<Relays>,
    tools: watch::Sender<Option<Vec<Tool>>>,
}

// === impl UpstreamClient ===

impl UpstreamClient {
    /// The client of `server`; re-read tool lists go to `tools`.
    pub(crate) fn new(
        server: &str,
        relays: Arc<Relays>,
        tools: watch::Sender<Option<Vec<Tool>>>,
    ) -> Self {
        Self {
            server: Arc::from(server),
            relays,
            tools,
        }
    }

    /// `transport` to this upstream, counting progress as it arrives.
    pub(crate) fn watch<T>(&self, transport: T) -> Ordered<T> {
        Ordered::new(transport, self.server.clone(), self.relays.clone())
    }
}

impl ClientHandler for UpstreamClient {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.relays.forward(&self.server, params).await;
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        tracing::info!(server = %self.server, "upstream tool list changed; reading it again");
        let (peer, server, tools) = (context.peer, self.server.clone(), self.tools.clone());
        // Not in the notification's handler: the list is a request on this connection.
        tokio::spawn(async move {
            match peer.list_all_tools().await {
                Ok(list) => {
                    let _ = tools.send(Some(list));
                }
                Err(e) => tracing::warn!(%server, error = %e, "cannot read the tool list"),
            }
        });
    }
}
