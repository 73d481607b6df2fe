//! Black-box tests of the gateway over real HTTP on ephemeral ports, plus router
//! tests with `oneshot`.

#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

mod support;

mod admit;
mod auth;
mod bad_input;
mod circuit;
mod cli;
mod connections;
mod dashboard;
mod http_errors;
mod invoke;
mod leases;
mod reload;
mod reserve;
mod shared_store;
mod tools;
