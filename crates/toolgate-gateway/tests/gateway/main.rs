//! Black-box tests of the gateway over real HTTP on ephemeral ports, plus router
//! tests with `oneshot`.

#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
#![allow(
    clippy::disallowed_methods,
    reason = "tests over real HTTP bound and measure real time"
)]

mod procs;
mod support;

mod activity;
mod admit;
mod auth;
mod bad_input;
mod bounds;
mod circuit;
mod cli;
mod connections;
mod dashboard;
mod deadline;
mod fairness;
mod fuzz;
mod http_errors;
mod invoke;
mod lease_caps;
mod leases;
mod mesh;
mod reload;
mod reload_rules;
mod reserve;
mod response_cap;
mod shared_store;
mod tenant_view;
mod tools;
