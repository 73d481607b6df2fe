//! What the gateway counts of one tenant on one tool.

use std::time::Duration;

use serde_json::{json, Map, Value};
use toolgate::Reason;

use super::series::Series;

/// One tenant's figures on one tool since it was last taken in (see
/// [`super::tenants::Tenants`]), and its series over the last minutes.
#[derive(Debug, Default)]
pub struct Tenant {
    /// Admissions.
    pub admitted: u64,
    /// Rejections, per reason in the order of [`Reason::ALL`].
    pub rejected: [u64; Reason::ALL.len()],
    /// Calls now waiting for admission on `POST /v1/admit`.
    pub waiting: u32,
    /// Second by second.
    pub series: Series,
    /// When it was last active (the order of eviction).
    pub(super) tick: u64,
}

// === impl Tenant ===

impl Tenant {
    /// Counts an admission at second `sec`.
    pub fn admitted(&mut self, sec: u64, waited: Duration) {
        self.admitted += 1;
        self.series.admitted(sec, waited);
    }

    /// Counts a rejection at second `sec`.
    pub fn rejected(&mut self, sec: u64, reason: Reason) {
        if let Some(i) = Reason::ALL.iter().position(|r| *r == reason) {
            self.rejected[i] += 1;
        }
        self.series.rejected(sec);
    }

    /// The figures as JSON (`now`: the current second): totals since it was taken
    /// in, calls waiting, and the last minutes' counts and wait percentiles.
    pub fn to_json(&self, name: &str, now: u64) -> Value {
        let by_reason: Map<String, Value> = Reason::ALL
            .iter()
            .zip(self.rejected)
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| (r.as_str().to_string(), json!(n)))
            .collect();
        json!({
            "tenant": name,
            "tracked": true,
            "admitted": self.admitted,
            "rejected": self.rejected.iter().sum::<u64>(),
            "rejected_by_reason": by_reason,
            "waiting": self.waiting,
            "window": self.series.totals(now).to_json(),
        })
    }

    /// The figures of a tenant not tracked (never seen, or evicted).
    pub fn untracked_json(name: &str) -> Value {
        json!({
            "tenant": name,
            "tracked": false,
            "admitted": 0,
            "rejected": 0,
            "rejected_by_reason": {},
            "waiting": 0,
            "window": {"admitted": 0, "rejected": 0, "wait_ms": {"p50": null, "p99": null}},
        })
    }
}
