//! Doctests only (`cfg(doctest)`): a value that it is a mistake to drop is
//! `#[must_use]`, and the compiler says so. The first block keeps the value and
//! compiles; the second drops it and must not compile.
//!
//! ```no_run
//! #![deny(unused_must_use)]
//! let _server = toolgate_mesh::testing::NatsServer::start();
//! ```
//!
//! A test server that is dropped at once is stopped before the test uses it:
//!
//! ```compile_fail
//! #![deny(unused_must_use)]
//! toolgate_mesh::testing::NatsServer::start();
//! ```
