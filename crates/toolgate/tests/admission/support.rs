//! Shared helpers of the admission tests.

use std::sync::Arc;
use std::time::Duration;

use toolgate::{Call, Engine, ManualClock, Policy, QuotaState, Rejection};

/// An engine on a manual clock from a TOML policy.
pub(crate) fn engine(toml: &str) -> (Engine, ManualClock) {
    let clock = ManualClock::new();
    let policy =
        Policy::from_toml_str(toml).unwrap_or_else(|e| panic!("invalid test policy:\n{e}"));
    (Engine::with_clock(policy, Arc::new(clock.clone())), clock)
}

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Tries `n` immediate admissions of `call`, keeping the permits; returns how many
/// were admitted.
pub(crate) fn admit_n(
    engine: &Engine,
    call: &Call<'_>,
    n: usize,
    keep: &mut Vec<toolgate::Permit>,
) -> usize {
    let before = keep.len();
    for _ in 0..n {
        if let Ok(p) = engine.try_admit(call) {
            keep.push(p);
        }
    }
    keep.len() - before
}

/// The live state of quota `path` of `tool`.
pub(crate) fn quota(engine: &Engine, tool: &str, path: &str) -> QuotaState {
    quota_of(engine, tool, None, path)
}

pub(crate) fn quota_of(
    engine: &Engine,
    tool: &str,
    tenant: Option<&str>,
    path: &str,
) -> QuotaState {
    let state = engine
        .tool_state(tool, tenant)
        .unwrap_or_else(|| panic!("no tool {tool}"));
    state
        .quotas
        .into_iter()
        .find(|q| q.quota == path)
        .unwrap_or_else(|| panic!("no quota {path} on {tool}"))
}

/// Asserts a rejection's reason string, quota path and retry time.
#[track_caller]
pub(crate) fn assert_rejected(
    r: Result<toolgate::Permit, Rejection>,
    reason: &str,
    quota: &str,
    retry: Option<Duration>,
) {
    let r = r.expect_err("expected a rejection");
    assert_eq!(r.reason().as_str(), reason, "{r}");
    assert_eq!(r.quota(), quota, "{r}");
    assert_eq!(r.retry_after(), retry, "{r}");
}
