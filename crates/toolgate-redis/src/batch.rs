//! Several calls admitted together (a reservation): their plans, merged into one step
//! per key for one run of the script, and which call a merged step's refusal names.

use std::sync::Arc;

use toolgate::{Call, Reason, Rejection};

use crate::plan::{denial, live, merge, plan, Step};
use crate::quota::{Compiled, Tool};

/// The plans of several calls and their merge.
#[derive(Debug)]
pub(crate) struct Batch {
    /// Each call's tool (`None`: an unknown tool that is allowed).
    tools: Vec<Option<Arc<Tool>>>,
    /// Each call's steps (none for an unknown tool).
    plans: Vec<Vec<Step>>,
    /// One step per key, costs summed: what the script runs.
    merged: Vec<Step>,
}

// === impl Batch ===

impl Batch {
    /// Plans `calls` on `compiled` and merges their steps.
    ///
    /// # Errors
    ///
    /// The first call's refusal that needs no Redis (an unknown tool under
    /// `unknown_tools = "deny"`, a cost above a quota's capacity), then a merged cost
    /// above a quota's capacity, naming the first call on its key.
    pub(crate) fn new(compiled: &Compiled, calls: &[Call<'_>]) -> Result<Self, Rejection> {
        let mut tools = Vec::with_capacity(calls.len());
        let mut plans = Vec::with_capacity(calls.len());
        for call in calls {
            match compiled.resolve(call)? {
                Some(tool) => {
                    plans.push(plan(&tool, call)?);
                    tools.push(Some(tool));
                }
                None => {
                    plans.push(Vec::new());
                    tools.push(None);
                }
            }
        }
        let merged = merge(&plans);
        let batch = Self {
            tools,
            plans,
            merged,
        };
        if let Some(s) = batch
            .merged
            .iter()
            .find(|s| s.cost > s.quota.spec.capacity())
        {
            return Err(Rejection::new(
                batch.name_of(&s.key),
                &*s.quota.spec.path,
                Reason::CostExceedsCapacity,
                None,
            ));
        }
        Ok(batch)
    }

    /// Each call's tool.
    pub(crate) fn tools(&self) -> &[Option<Arc<Tool>>] {
        &self.tools
    }

    /// The first known tool of the calls; `None` when every tool is unknown.
    pub(crate) fn first(&self) -> Option<&Arc<Tool>> {
        self.tools.iter().flatten().next()
    }

    /// Each call's steps.
    pub(crate) fn plans(&self) -> Vec<&[Step]> {
        self.plans.iter().map(Vec::as_slice).collect()
    }

    /// The steps the script runs.
    pub(crate) fn merged(&self) -> &[Step] {
        &self.merged
    }

    /// The refusal the script's denial `code` of live merged step `blame` (from 1)
    /// means, naming the first call on its key.
    pub(crate) fn denial(&self, blame: usize, code: i64, retry_us: i64) -> Rejection {
        let s = live(&self.merged)[blame - 1];
        denial(&self.name_of(&s.key), &s.quota, code, retry_us)
    }

    /// The tool of the first call with a step on `key` (empty if none).
    fn name_of(&self, key: &str) -> Arc<str> {
        let i = self
            .plans
            .iter()
            .position(|p| p.iter().any(|s| *s.key == *key))
            .unwrap_or(0);
        self.tools
            .get(i)
            .cloned()
            .flatten()
            .map_or_else(|| Arc::from(""), |t| t.name.clone())
    }
}
