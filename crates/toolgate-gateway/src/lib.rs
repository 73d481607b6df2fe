//! toolgate's gateway and command line: `toolgate serve`, `toolgate mcp`,
//! `toolgate check` and `toolgate demo`.
//!
//! The gateway puts the core engine behind HTTP (see `docs/gateway.md`): admission
//! with server-side leases, all-or-nothing reservations, execution against a tool's
//! upstream, live state, Prometheus metrics and a live dashboard. Build the router
//! with [`app::router`] on an [`state::AppState`].

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]
#![allow(
    clippy::disallowed_methods,
    reason = "leases, connections and HTTP dates are timed on the real clock"
)]

pub mod activity;
pub mod api;
pub mod app;
pub mod auth;
pub mod bounds;
pub mod call;
pub mod cli;
pub mod conn;
pub mod connections;
pub mod demo;
pub mod error;
pub mod execute;
pub mod extract;
pub mod leases;
pub mod mcp;
pub mod mcp_stdio;
pub mod mesh;
pub mod metrics;
pub mod ratelimit;
pub mod reload;
pub mod rescue;
pub mod serve;
pub mod settings;
pub mod state;
pub mod store;
pub mod upstream;
pub mod urgency;

/// The bundled example config: the customer-service agent.
pub const EXAMPLE_CONFIG: &str = include_str!("../config/example.toml");
