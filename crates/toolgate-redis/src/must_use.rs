//! Doctests only (`cfg(doctest)`): a value that it is a mistake to drop is
//! `#[must_use]`, and the compiler says so. The first block uses the value and
//! compiles; the second drops it and must not compile.
//!
//! ```
//! #![deny(unused_must_use)]
//! use std::time::Duration;
//! let policy = toolgate::Policy::from_toml_str("").unwrap();
//! let store = toolgate::config::StoreConfig::new("redis://127.0.0.1:1");
//! let _ = toolgate_redis::Builder::new(policy, store).lease_ttl(Duration::from_secs(9));
//! ```
//!
//! A builder whose result is dropped connects nothing:
//!
//! ```compile_fail
//! #![deny(unused_must_use)]
//! use std::time::Duration;
//! let policy = toolgate::Policy::from_toml_str("").unwrap();
//! let store = toolgate::config::StoreConfig::new("redis://127.0.0.1:1");
//! toolgate_redis::Builder::new(policy, store).lease_ttl(Duration::from_secs(9));
//! ```
