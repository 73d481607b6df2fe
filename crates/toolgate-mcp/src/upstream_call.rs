//! One `tools/call` sent upstream: its progress relayed while it runs (all of it before
//! the answer), and a call
//! dropped before its answer (cancelled by the client, cut by `call_timeout`)
//! cancelled upstream with `notifications/cancelled`.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, ProgressToken, RequestId, ServerResult,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use rmcp::{Peer, RoleClient, RoleServer};

use crate::progress::Relays;

/// The longest an answer waits for the progress notifications that came before it.
const SETTLE: Duration = Duration::from_secs(1);

/// Where a call's progress goes: the client's connection and its token.
pub(crate) type ProgressTarget = (Peer<RoleServer>, ProgressToken);

/// Sends the call to `server` and waits for its answer.
///
/// # Cancel safety
///
/// Dropping the future after the request was sent sends `notifications/cancelled`
/// upstream (in the background) and stops relaying its progress.
pub(crate) async fn call(
    peer: &Peer<RoleClient>,
    server: &Arc<str>,
    params: CallToolRequestParams,
    relays: &Arc<Relays>,
    progress: Option<&ProgressTarget>,
) -> Result<CallToolResult, ServiceError> {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await?;
    let relay = progress.map(|(client, token)| {
        relays.open(
            server,
            handle.progress_token.clone(),
            client.clone(),
            token.clone(),
        )
    });
    let mut abandon = Abandon {
        peer: peer.clone(),
        id: Some(handle.id.clone()),
    };
    let answer = handle.await_response().await;
    abandon.id = None;
    if let Some(relay) = &relay {
        relay.settle(SETTLE).await;
    }
    match answer? {
        ServerResult::CallToolResult(r) => Ok(r),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// Cancels the request upstream when dropped before its answer.
struct Abandon {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Drop for Abandon {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        let reason = Some("the call was cancelled at toolgate".to_string());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(Some(id), reason))
                    .await;
            });
        }
    }
}
