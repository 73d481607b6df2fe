//! Doctests only (`cfg(doctest)`): a value that it is a mistake to drop is
//! `#[must_use]`, and the compiler says so. The first block uses each such value and
//! compiles; every other block drops one of them and must not compile.
//!
//! ```
//! #![deny(unused_must_use)]
//! use std::time::Duration;
//! use toolgate::{AttemptResult, Call, Completion, RunOptions};
//!
//! let _ = Call::new("lookup").tenant("acme");
//! let _ = Completion::success().latency(Duration::from_millis(5));
//! let _ = RunOptions::new().deadline(Duration::from_secs(1));
//! let _ = AttemptResult::<(), ()>::success(()).status(200);
//! let _ = toolgate::layer::CallSpec::new("lookup").tenant("acme");
//! let _ = toolgate::retry::RetryBudget::new(0.1, 1).try_withdraw(0);
//! ```
//!
//! A builder whose result is dropped configured nothing:
//!
//! ```compile_fail
//! #![deny(unused_must_use)]
//! toolgate::Call::new("lookup").tenant("acme");
//! ```
//!
//! ```compile_fail
//! #![deny(unused_must_use)]
//! toolgate::Completion::success().latency(std::time::Duration::from_millis(5));
//! ```
//!
//! ```compile_fail
//! #![deny(unused_must_use)]
//! toolgate::RunOptions::new().deadline(std::time::Duration::from_secs(1));
//! ```
//!
//! ```compile_fail
//! #![deny(unused_must_use)]
//! toolgate::layer::CallSpec::new("lookup").tenant("acme");
//! ```
//!
//! An attempt's result that is dropped never reaches the pipeline:
//!
//! ```compile_fail
//! #![deny(unused_must_use)]
//! toolgate::AttemptResult::<(), ()>::success(()).status(200);
//! ```
//!
//! A withdrawal that is not looked at spends a retry for nothing:
//!
//! ```compile_fail
//! #![deny(unused_must_use)]
//! toolgate::retry::RetryBudget::new(0.1, 1).try_withdraw(0);
//! ```
//!
//! A permit that is dropped at once gives its quota back before the call runs:
//!
//! ```compile_fail
//! #![deny(unused_must_use)]
//! let engine = toolgate::Engine::new(toolgate::Policy::from_toml_str("").unwrap());
//! engine.try_admit(&toolgate::Call::new("lookup")).unwrap();
//! ```
//!
//! ```
//! #![deny(unused_must_use)]
//! let engine = toolgate::Engine::new(toolgate::Policy::from_toml_str("").unwrap());
//! let _permit = engine.try_admit(&toolgate::Call::new("lookup")).unwrap();
//! ```
