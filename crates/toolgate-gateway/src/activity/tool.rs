//! What the gateway counts of one tool: its series, its waits per priority class and
//! its tracked tenants.

use std::time::Duration;

use serde_json::{json, Map, Value};
use toolgate::{Priority, Reason};

use super::series::Series;
use super::tenants::Tenants;

/// One tool's activity.
#[derive(Debug, Default)]
pub struct ToolActivity {
    /// Every tenant's decisions together.
    pub series: Series,
    /// The admissions of each priority class, in the order of [`Priority::ALL`].
    by_class: [Series; Priority::ALL.len()],
    /// The tenants tracked.
    pub tenants: Tenants,
}

// === impl ToolActivity ===

impl ToolActivity {
    /// Counts an admission at second `sec`.
    pub fn admitted(&mut self, sec: u64, tenant: Option<&str>, waited: Duration, p: Priority) {
        self.series.admitted(sec, waited);
        self.by_class[p as usize].admitted(sec, waited);
        if let Some(t) = tenant {
            self.tenants.touch(t).admitted(sec, waited);
        }
    }

    /// Counts a rejection at second `sec`.
    pub fn rejected(&mut self, sec: u64, tenant: Option<&str>, reason: Reason) {
        self.series.rejected(sec);
        if let Some(t) = tenant {
            self.tenants.touch(t).rejected(sec, reason);
        }
    }

    /// The window's wait percentiles per priority class:
    /// `{"interactive": {"admitted", "p50", "p99"}, …}`.
    pub fn classes_json(&self, now: u64) -> Value {
        let m: Map<String, Value> = Priority::ALL
            .iter()
            .zip(&self.by_class)
            .map(|(p, s)| {
                let t = s.totals(now);
                let v = json!({
                    "admitted": t.admitted,
                    "p50": t.waits.quantile_ms(0.5),
                    "p99": t.waits.quantile_ms(0.99),
                });
                (p.as_str().to_string(), v)
            })
            .collect();
        Value::Object(m)
    }

    /// The tracked tenants active in the window, most recently active first, at most
    /// `limit` of them, each with its figures.
    pub fn tenants_json(&self, now: u64, limit: usize) -> Vec<Value> {
        self.tenants
            .recent()
            .filter(|(_, t)| t.waiting > 0 || !t.series.is_idle(now))
            .take(limit)
            .map(|(name, t)| t.to_json(name, now))
            .collect()
    }
}
