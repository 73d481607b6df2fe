//! Shared helpers of the admission tests.

use std::sync::Arc;

use toolgate::{Engine, ManualClock, Policy};

/// An engine on a manual clock from a TOML policy.
pub fn engine(toml: &str) -> (Engine, ManualClock) {
    let clock = ManualClock::new();
    let policy =
        Policy::from_toml_str(toml).unwrap_or_else(|e| panic!("invalid test policy:\n{e}"));
    (Engine::with_clock(policy, Arc::new(clock.clone())), clock)
}
