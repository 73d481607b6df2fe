//! `toolgate mcp`: the same [`Gateway`] spoken to over stdin and stdout, for clients
//! that launch a command. Nothing but protocol goes to stdout.

use rmcp::ServiceExt;

use crate::gateway::Gateway;

/// Serves `gateway` on stdin/stdout until the client closes them.
///
/// # Errors
///
/// When the handshake fails or the service ends abnormally.
pub async fn serve(gateway: Gateway) -> Result<(), String> {
    let running = gateway
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("the MCP handshake on stdio failed: {e}"))?;
    running
        .waiting()
        .await
        .map(|_| ())
        .map_err(|e| format!("the stdio service ended: {e}"))
}
