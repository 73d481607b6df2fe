//! One connection to an upstream server: a child process on stdio or a Streamable
//! HTTP endpoint, both through rmcp's client transports, with the handshake done.

use std::collections::HashMap;
use std::process::Stdio;

use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};

use crate::client::UpstreamClient;
use crate::server_config::{ServerConfig, Transport};

/// The most requests in flight at once on one Streamable HTTP upstream.
const MAX_POSTS: usize = 1024;

/// A connected upstream.
pub(crate) type Link = RunningService<RoleClient, UpstreamClient>;

/// Starts (or reaches) the server and completes the MCP handshake.
///
/// # Errors
///
/// When the process cannot be started, the endpoint cannot be reached, or the
/// handshake fails; the message says which.
pub(crate) async fn connect(
    config: &ServerConfig,
    handler: UpstreamClient,
) -> Result<Link, String> {
    match &config.transport {
        Transport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env);
            // The child's own log goes where toolgate's goes; stdout is the protocol.
            let (transport, _) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| format!("cannot start {command:?}: {e}"))?;
            let transport = handler.watch(transport);
            handler
                .serve(transport)
                .await
                .map_err(|e| format!("the MCP handshake with {command:?} failed: {e}"))
        }
        Transport::Http { url, headers } => {
            let mut custom = HashMap::new();
            for (k, v) in headers {
                // Checked when the config was read.
                if let (Ok(k), Ok(v)) = (
                    http::HeaderName::from_bytes(k.as_bytes()),
                    http::HeaderValue::from_str(v),
                ) {
                    custom.insert(k, v);
                }
            }
            // Calls in flight on one upstream are bounded by admission (its
            // `concurrency`, `max_wait`); rmcp's default of 16 POSTs at once would
            // queue calls toolgate admitted.
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(custom)
                .max_concurrent_requests(MAX_POSTS);
            let transport = handler.watch(StreamableHttpClientTransport::from_config(config));
            handler
                .serve(transport)
                .await
                .map_err(|e| format!("the MCP handshake with {url} failed: {e}"))
        }
    }
}
