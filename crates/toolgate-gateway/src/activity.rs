//! Who was admitted and rejected, second by second: the figures behind
//! `GET /v1/activity`, the per-tenant figures of `GET /v1/tools/{tool}?tenant=` and
//! the dashboard's plots.
//!
//! The core counts per tool only, so that its fast path pays for no tenant; the
//! gateway counts here, where every decision of `POST /v1/admit`, `/v1/reserve`,
//! `invoke`, the event mesh and `tools/call` on `/mcp` passes with its tenant.
//! Everything is bounded: only tools of the policy are counted (their number is the
//! operator's), each keeps its last [`series::WINDOW_S`] seconds, and at most
//! [`tenants::MAX_TENANTS`] tenants per tool are tracked, the least recently active
//! evicted first.

pub mod series;
pub mod tenant;
pub mod tenants;
pub mod tool;
pub mod waits;

use hashbrown::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use toolgate::{Clock, Priority, Reason};

pub use tool::ToolActivity;

/// The tools of the policy, by name.
/// By tool name; `hashbrown`'s default hasher (foldhash) for the reason given at
/// [`crate::ratelimit::Headers`]: looked up on every admission, keyed by the policy.
type Tools = HashMap<Arc<str>, Arc<Mutex<ToolActivity>>>;

/// The activity of every tool of the policy.
#[derive(Debug)]
pub struct Activity {
    clock: Arc<dyn Clock>,
    /// Read on every decision (no lock), replaced on reload.
    tools: ArcSwap<Tools>,
}

/// A call of a tenant waiting for admission: counted in its tenant's `waiting` until
/// dropped.
#[derive(Debug)]
pub struct Waiting {
    tool: Arc<Mutex<ToolActivity>>,
    tenant: String,
}

// === impl Activity ===

impl Activity {
    /// Counts the decisions on `tools`, timed on `clock` (the engine's).
    pub fn new<'a>(clock: Arc<dyn Clock>, tools: impl IntoIterator<Item = &'a str>) -> Self {
        let a = Self {
            clock,
            tools: ArcSwap::default(),
        };
        a.retain(tools);
        a
    }

    /// Counts the decisions on `tools` from now on: a tool that stays keeps its
    /// figures, a new one starts empty, one that left the policy is forgotten.
    pub fn retain<'a>(&self, tools: impl IntoIterator<Item = &'a str>) {
        let names: Vec<&str> = tools.into_iter().collect();
        self.tools.rcu(|old| {
            let next: Tools = names
                .iter()
                .map(|&t| (Arc::from(t), old.get(t).cloned().unwrap_or_default()))
                .collect();
            next
        });
    }

    /// The current second of the engine's clock.
    pub fn now(&self) -> u64 {
        self.clock.now() / 1_000_000_000
    }

    /// The activity of `tool`, if the policy has it.
    pub fn tool(&self, tool: &str) -> Option<Arc<Mutex<ToolActivity>>> {
        self.tools.load().get(tool).cloned()
    }

    /// Counts on `tool`'s activity, if the policy has it (no reference count moves).
    fn count(&self, tool: &str, f: impl FnOnce(u64, &mut ToolActivity)) {
        self.count_at(tool, self.clock.now(), f);
    }

    /// Counts on `tool`'s activity in the second of `at` (nanoseconds of the engine's
    /// clock).
    fn count_at(&self, tool: &str, at: u64, f: impl FnOnce(u64, &mut ToolActivity)) {
        if let Some(t) = self.tools.load().get(tool) {
            f(at / 1_000_000_000, &mut t.lock());
        }
    }

    /// Every tool of the policy, by name.
    pub fn tools(&self) -> Vec<(Arc<str>, Arc<Mutex<ToolActivity>>)> {
        let map = self.tools.load();
        let mut v: Vec<_> = map.iter().map(|(k, t)| (k.clone(), t.clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Counts an admission of `tool` after waiting `waited`.
    pub fn admitted(&self, tool: &str, tenant: Option<&str>, waited: Duration, p: Priority) {
        self.admitted_at(tool, tenant, waited, p, self.clock.now());
    }

    /// Counts an admission of `tool` made at `at` (nanoseconds of the engine's clock,
    /// [`toolgate::Permit::admitted_at`]: no second read of the clock).
    pub fn admitted_at(
        &self,
        tool: &str,
        tenant: Option<&str>,
        waited: Duration,
        p: Priority,
        at: u64,
    ) {
        self.count_at(tool, at, |sec, t| t.admitted(sec, tenant, waited, p));
    }

    /// Counts a rejection of a call of `tool`.
    pub fn rejected(&self, tool: &str, tenant: Option<&str>, reason: Reason) {
        self.count(tool, |now, t| t.rejected(now, tenant, reason));
    }

    /// Counts a call of `tenant` waiting for admission on `tool` until the guard is
    /// dropped (`None` without a tenant or for a tool outside the policy).
    pub fn waiting(&self, tool: &str, tenant: Option<&str>) -> Option<Waiting> {
        let (tool, tenant) = (self.tool(tool)?, tenant?);
        {
            let mut t = tool.lock();
            let w = &mut t.tenants.touch(tenant).waiting;
            *w = w.saturating_add(1);
        }
        Some(Waiting {
            tool,
            tenant: tenant.to_string(),
        })
    }
}

impl toolgate_mcp::Decisions for Activity {
    fn admitted(&self, tool: &str, tenant: Option<&str>, waited: Duration, p: Priority) {
        Activity::admitted(self, tool, tenant, waited, p);
    }

    fn rejected(&self, tool: &str, tenant: Option<&str>, reason: Reason) {
        Activity::rejected(self, tool, tenant, reason);
    }
}

// === impl Waiting ===

impl Drop for Waiting {
    fn drop(&mut self) {
        // An evicted tenant took its count with it.
        if let Some(t) = self.tool.lock().tenants.get_mut(&self.tenant) {
            t.waiting = t.waiting.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate::ManualClock;

    #[test]
    fn only_tools_of_the_policy_are_counted_and_a_reload_keeps_the_rest() {
        let clock = Arc::new(ManualClock::new());
        let a = Activity::new(clock.clone(), ["x", "y"]);
        a.admitted("x", Some("acme"), Duration::ZERO, Priority::Default);
        a.admitted("nope", Some("acme"), Duration::ZERO, Priority::Default);
        assert!(a.tool("nope").is_none());
        a.retain(["x", "z"]);
        assert!(a.tool("y").is_none());
        let x = a.tool("x").expect("x stays");
        assert_eq!(x.lock().tenants.get("acme").map(|t| t.admitted), Some(1));
        let w = a.waiting("x", Some("acme"));
        assert_eq!(x.lock().tenants.get("acme").map(|t| t.waiting), Some(1));
        drop(w);
        assert_eq!(x.lock().tenants.get("acme").map(|t| t.waiting), Some(0));
    }
}
