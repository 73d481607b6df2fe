//! toolgate's gateway and command line: `toolgate serve`, `toolgate check` and
//! `toolgate demo`.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

pub mod cli;
pub mod demo;

/// The bundled example config: the customer-service agent.
pub const EXAMPLE_CONFIG: &str = include_str!("../config/example.toml");
