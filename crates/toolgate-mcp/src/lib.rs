//! toolgate's MCP gateway: admission control for every MCP client, with no code
//! change (see `docs/mcp.md`).
//!
//! toolgate connects to upstream MCP servers (`[mcp.servers.NAME]`: a child process
//! on stdio, or a Streamable HTTP endpoint, `https://` over rustls: [`tls`]) and
//! serves their tools, aggregated, to MCP clients over Streamable HTTP (`/mcp` in `toolgate serve`) or stdio (`toolgate
//! mcp`). Every `tools/call` is admitted by toolgate's engine under the tool's
//! policy key `mcp:SERVER/TOOL` ([`naming`]) and completed with its outcome; nothing
//! else is admitted. A rejection is an answer a model can act on ([`rejection`]).
//!
//! Built on the official Rust MCP SDK, `rmcp`, for both sides.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod call;
pub mod catalog;
mod client;
pub mod config;
pub mod decisions;
pub mod gateway;
pub mod http;
mod link;
pub mod naming;
mod ordered;
mod progress;
pub mod rejection;
pub mod schema;
pub mod server_config;
pub mod sessions;
pub mod stdio;
pub mod tls;
mod upstream_call;
pub mod upstreams;

pub use catalog::{Catalog, Entry};
pub use client::UpstreamClient;
pub use config::{McpConfig, OnReject};
pub use decisions::Decisions;
pub use gateway::{Gateway, Tenant};
pub use server_config::{ServerConfig, Transport};
pub use sessions::Sessions;
pub use tls::CaFile;
pub use upstreams::{ServerView, Upstreams};
