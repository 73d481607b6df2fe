//! A tool's retry settings as the engine runs them ([`RetryRuntime`]).

use std::sync::Arc;

use crate::config::RetryConfig;

use super::{Backoff, RetryBudget};

/// A tool's retry settings as the engine runs them.
#[derive(Debug, Clone)]
pub(crate) struct RetryRuntime {
    pub(crate) config: RetryConfig,
    pub(crate) backoff: Option<Backoff>,
    pub(crate) budget: Arc<RetryBudget>,
}

// === impl RetryRuntime ===

impl RetryRuntime {
    /// The runtime of `config`; the budget of `old` is kept when its settings did not
    /// change (a reload does not hand out a fresh budget).
    pub(crate) fn new(config: &RetryConfig, old: Option<&RetryRuntime>) -> Self {
        let budget = old
            .filter(|o| {
                o.config.budget_ratio == config.budget_ratio
                    && o.config.budget_min_per_second == config.budget_min_per_second
            })
            .map_or_else(
                || {
                    Arc::new(RetryBudget::new(
                        config.budget_ratio,
                        config.budget_min_per_second,
                    ))
                },
                |o| o.budget.clone(),
            );
        Self {
            config: config.clone(),
            // Validated with the config (`base` > 0, `cap` ≥ `base`).
            backoff: Backoff::try_new(config.base, config.cap).ok(),
            budget,
        }
    }
}
