//! One connection to an upstream server: a child process on stdio or a Streamable
//! HTTP endpoint, both through rmcp's client transports, with the handshake done.

use std::collections::{BTreeMap, HashMap};
use std::process::Stdio;

use rmcp::service::{ClientInitializeError, RunningService};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};

use crate::client::UpstreamClient;
use crate::server_config::{ServerConfig, Transport};
use crate::tls::{self, CaFile};

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
        Transport::Http {
            url,
            headers,
            ca_file,
        } => connect_http(url, headers, ca_file.as_ref(), handler).await,
    }
}

/// Reaches a Streamable HTTP server (over TLS for `https://`, trusting `ca_file`'s
/// CAs only when given) and completes the handshake.
async fn connect_http(
    url: &str,
    headers: &BTreeMap<String, String>,
    ca_file: Option<&CaFile>,
    handler: UpstreamClient,
) -> Result<Link, String> {
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
    // Calls in flight on one upstream are bounded by admission (its `concurrency`,
    // `max_wait`); rmcp's default of 16 POSTs at once would queue calls toolgate
    // admitted.
    let config = StreamableHttpClientTransportConfig::with_uri(url)
        .custom_headers(custom)
        .max_concurrent_requests(MAX_POSTS);
    let client = tls::http_client(ca_file)?;
    let transport = handler.watch(StreamableHttpClientTransport::with_client(client, config));
    handler
        .serve(transport)
        .await
        .map_err(|e| format!("the MCP handshake with {url} failed: {}", why(&e)))
}

/// Why a handshake failed, with the causes of a transport error: rmcp's message
/// leaves them out, and they say what went wrong (which certificate check failed,
/// for one).
fn why(e: &ClientInitializeError) -> String {
    match e {
        ClientInitializeError::TransportError { error, .. } => {
            match error
                .error
                .downcast_ref::<StreamableHttpError<reqwest_mcp::Error>>()
            {
                Some(StreamableHttpError::Client(e)) => tls::chain(e),
                _ => tls::chain(&*error.error),
            }
        }
        e => e.to_string(),
    }
}
