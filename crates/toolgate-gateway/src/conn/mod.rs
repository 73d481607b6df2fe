//! The connection layer: our own accept loop on hyper's HTTP/1 connections, in place
//! of `axum::serve`, so that no client can hold the gateway's connections or its
//! shutdown.
//!
//! - `header_read_timeout` and `idle_timeout` close connections that send no
//!   request or do not read their answers (the driver's module doc says when each
//!   runs); a request in flight is never cut off by them;
//! - `max_connections` bounds the connections the router serves; a few beyond it get
//!   a health-only answer and any further one is closed at once ([`serve`]), with
//!   `max_connections` fitted to the file-descriptor limit at start-up
//!   ([`fit_to_fd_limit`]);
//! - hyper's own empty 400/414/431 answers become JSON errors like every other
//!   (the `head_error` module doc says how);
//! - `shutdown_grace` bounds the shutdown whatever clients do.
//!
//! `toolgate serve` on the Redis store serves each connection on one of a set of
//! single-threaded runtimes ([`Cores`], [`serve_on`]); [`serve`] serves them on the
//! current runtime, as `toolgate serve` does in memory.

mod activity;
mod cores;
mod driver;
mod fd_limit;
mod head_error;
mod io;
mod limits;
mod listener;
mod overflow;
mod rewake;
mod service;

pub use cores::{Cores, MAX_CORES};
pub use fd_limit::{fit_to_fd_limit, FD_RESERVE};
pub use limits::Limits;
pub use listener::{serve, serve_on, Served};
