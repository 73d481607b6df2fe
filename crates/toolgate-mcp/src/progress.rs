//! Progress notifications of a running call, relayed from the upstream to the client
//! that asked for them.
//!
//! A client that wants progress sends a `progressToken`; toolgate sends the upstream
//! a token of its own (unique across every downstream session, so two clients that
//! chose the same token never see each other's progress) and relays each upstream
//! notification under the client's token, for as long as the call runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use rmcp::model::{NumberOrString, ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};

/// The relays of calls in flight.
#[derive(Debug, Default)]
pub(crate) struct Relays {
    next: AtomicI64,
    open: Mutex<HashMap<ProgressToken, (Peer<RoleServer>, ProgressToken)>>,
}

/// One call's relay: removed when dropped (the call ended or was cancelled).
#[derive(Debug)]
pub(crate) struct Relay {
    relays: Arc<Relays>,
    upstream: ProgressToken,
}

// === impl Relays ===

impl Relays {
    /// Opens a relay to `client`'s `token`; the upstream gets [`Relay::token`].
    pub(crate) fn open(self: &Arc<Self>, client: Peer<RoleServer>, token: ProgressToken) -> Relay {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let upstream = ProgressToken(NumberOrString::String(format!("toolgate-{n}").into()));
        self.open.lock().insert(upstream.clone(), (client, token));
        Relay {
            relays: self.clone(),
            upstream,
        }
    }

    /// Relays an upstream notification to its client (a token toolgate did not hand
    /// out, or of a call that ended, is dropped).
    pub(crate) async fn forward(&self, mut params: ProgressNotificationParam) {
        let Some((peer, token)) = self.open.lock().get(&params.progress_token).cloned() else {
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

impl Relay {
    /// The token sent upstream.
    pub(crate) fn token(&self) -> &ProgressToken {
        &self.upstream
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.relays.open.lock().remove(&self.upstream);
    }
}
