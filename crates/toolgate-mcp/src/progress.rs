//! Progress notifications of a running call, relayed from the upstream to the client
//! that asked for them.
//!
//! A client that wants progress sends a `progressToken`. The upstream request gets the
//! token rmcp gives every request of that connection; each upstream notification
//! carrying it is relayed under the client's own token, for as long as the call runs.
//! Relays are keyed by server and token, so two upstreams (or two clients that chose
//! the same token) never see each other's progress.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};

/// An upstream's token: its server and the token rmcp sent it.
type Key = (Arc<str>, ProgressToken);

/// The client's side: its connection and its own token.
type Target = (Peer<RoleServer>, ProgressToken);

/// The relays of calls in flight.
#[derive(Debug, Default)]
pub(crate) struct Relays {
    open: Mutex<HashMap<Key, Target>>,
}

/// One call's relay: removed when dropped (the call ended or was cancelled).
#[derive(Debug)]
pub(crate) struct Relay {
    relays: Arc<Relays>,
    key: Key,
}

// === impl Relays ===

impl Relays {
    /// Relays `server`'s notifications for `upstream` to `client`'s `token`.
    pub(crate) fn open(
        self: &Arc<Self>,
        server: &Arc<str>,
        upstream: ProgressToken,
        client: Peer<RoleServer>,
        token: ProgressToken,
    ) -> Relay {
        let key = (server.clone(), upstream);
        self.open.lock().insert(key.clone(), (client, token));
        Relay {
            relays: self.clone(),
            key,
        }
    }

    /// Relays an upstream notification to its client (one for a call that ended, or
    /// of a token toolgate did not send, is dropped).
    pub(crate) async fn forward(&self, server: &Arc<str>, mut params: ProgressNotificationParam) {
        let key = (server.clone(), params.progress_token.clone());
        let Some((peer, token)) = self.open.lock().get(&key).cloned() else {
            return;
        };
        params.progress_token = token;
        params.meta = None;
        if let Err(e) = peer.notify_progress(params).await {
            tracing::debug!(error = %e, "a progress notification could not be relayed");
        }
    }
}

// === impl Relay ===

impl Drop for Relay {
    fn drop(&mut self) {
        self.relays.open.lock().remove(&self.key);
    }
}
