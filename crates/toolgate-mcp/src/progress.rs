//! Progress notifications of a running call, relayed from the upstream to the client
//! that asked for them.
//!
//! A client that wants progress sends a `progressToken`. The upstream request gets the
//! token rmcp gives every request of that connection; each upstream notification
//! carrying it is relayed under the client's own token, for as long as the call runs.
//! Relays are keyed by server and token, so two upstreams (or two clients that chose
//! the same token) never see each other's progress.
//!
//! Notifications are counted as they arrive ([`crate::ordered`]); the call waits for
//! the ones that came before its answer to be relayed ([`Relay::settle`]), so the
//! client sees every progress step before the result, as the server sent them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use tokio::sync::Notify;

/// An upstream's token: its server and the token rmcp sent it.
type Key = (Arc<str>, ProgressToken);

/// The client's side (its connection and its own token), and how many of the
/// upstream's notifications arrived and are not relayed yet.
#[derive(Debug)]
struct Target {
    client: Peer<RoleServer>,
    token: ProgressToken,
    pending: usize,
}

/// The relays of calls in flight.
#[derive(Debug, Default)]
pub(crate) struct Relays {
    open: Mutex<HashMap<Key, Target>>,
    /// Signalled each time a notification was relayed.
    relayed: Notify,
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
        let target = Target {
            client,
            token,
            pending: 0,
        };
        self.open.lock().insert(key.clone(), target);
        Relay {
            relays: self.clone(),
            key,
        }
    }

    /// Counts a notification of `server` for `upstream` that just arrived, before rmcp
    /// hands it to [`forward`](Self::forward).
    pub(crate) fn arrived(&self, server: &Arc<str>, upstream: &ProgressToken) {
        let key = (server.clone(), upstream.clone());
        if let Some(target) = self.open.lock().get_mut(&key) {
            target.pending += 1;
        }
    }

    /// Relays an upstream notification to its client (one for a call that ended, or
    /// of a token toolgate did not send, is dropped).
    pub(crate) async fn forward(&self, server: &Arc<str>, mut params: ProgressNotificationParam) {
        let key = (server.clone(), params.progress_token.clone());
        let Some((peer, token)) = self
            .open
            .lock()
            .get(&key)
            .map(|t| (t.client.clone(), t.token.clone()))
        else {
            return;
        };
        params.progress_token = token;
        params.meta = None;
        if let Err(e) = peer.notify_progress(params).await {
            tracing::debug!(error = %e, "a progress notification could not be relayed");
        }
        if let Some(target) = self.open.lock().get_mut(&key) {
            target.pending = target.pending.saturating_sub(1);
        }
        self.relayed.notify_waiters();
    }
}

// === impl Relay ===

impl Relay {
    /// Waits until every notification that arrived for this call so far was relayed,
    /// or `bound` passed (a handler that never ran must not hold the answer back).
    pub(crate) async fn settle(&self, bound: Duration) {
        let deadline = tokio::time::sleep(bound);
        tokio::pin!(deadline);
        loop {
            let relayed = self.relays.relayed.notified();
            tokio::pin!(relayed);
            relayed.as_mut().enable();
            let pending = self.relays.open.lock().get(&self.key).map(|t| t.pending);
            if pending.unwrap_or(0) == 0 {
                return;
            }
            tokio::select! {
                () = &mut relayed => {}
                () = &mut deadline => return,
            }
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.relays.open.lock().remove(&self.key);
    }
}
