//! The fairness keys: `fairness` and `reserve` on a tool or pool, and the
//! `[tenants.ID]` table (each tenant's `weight`).

use std::collections::BTreeMap;

use serde_json::Value;

use super::section::{expect_str, int_in, Section};
use super::{ConfigError, QuotaConfig, Reserve};
use crate::vocab::{Partition, Priority};

/// The largest tenant weight.
pub const MAX_WEIGHT: u32 = 1000;

/// A tenant's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TenantConfig {
    /// Its share of a contended fair quota against other tenants' (default 1).
    pub weight: u32,
}

// === impl TenantConfig ===

impl TenantConfig {
    /// A tenant of this weight.
    pub fn new(weight: u32) -> Self {
        Self { weight }
    }
}

impl Default for TenantConfig {
    fn default() -> Self {
        Self { weight: 1 }
    }
}

/// Reads `reserve = { interactive = "20%", default = "10%" }`.
pub(super) fn reserve(s: &mut Section<'_, '_>) -> Reserve {
    let Some(v) = s.raw("reserve") else {
        return Reserve::default();
    };
    let path = s.child_path("reserve");
    let Some(mut sec) = Section::open(path, v, s.errors()) else {
        return Reserve::default();
    };
    let share = |v: &Value| Reserve::parse_share(expect_str(v)?);
    let r = Reserve {
        interactive: sec.get_with("interactive", share).unwrap_or(0),
        default: sec.get_with("default", share).unwrap_or(0),
    };
    if sec.raw("batch").is_some() {
        sec.error(
            "batch",
            "batch is the lowest class: there is no class below it to keep a share from",
        );
    }
    sec.finish();
    r
}

/// Reads `[tenants.ID] weight = N`.
pub(super) fn tenants(v: &Value, errors: &mut Vec<ConfigError>) -> BTreeMap<String, TenantConfig> {
    let mut out = BTreeMap::new();
    let Some(mut all) = Section::open("tenants", v, errors) else {
        return out;
    };
    for (id, v) in v.as_object().into_iter().flatten() {
        let path = all.child_path(id);
        let Some(mut s) = Section::open(path, v, all.errors()) else {
            continue;
        };
        let weight = s
            .get_with("weight", |v| int_in(v, 1, u64::from(MAX_WEIGHT)))
            .and_then(|w| u32::try_from(w).ok())
            .unwrap_or(1);
        s.finish();
        out.insert(id.clone(), TenantConfig { weight });
    }
    out
}

/// The rules a tool's or pool's fairness keys follow together with its quotas.
pub(super) fn check_quota(q: &QuotaConfig, err: &mut impl FnMut(&str, String)) {
    if q.fairness.is_some() && q.partition == Some(Partition::Tenant) {
        err(
            "fairness",
            "fairness across tenants needs a shared quota, and partition = \"tenant\" gives \
             each tenant its own"
                .into(),
        );
    }
    let r = q.reserve;
    if r.is_empty() {
        return;
    }
    let total = r.interactive + r.default;
    if total > crate::vocab::MAX_RESERVE {
        err(
            "reserve",
            format!(
                "the shares add up to {}%: at most {}% (the lowest class keeps the rest)",
                f64::from(total) / 100.0,
                crate::vocab::MAX_RESERVE / 100
            ),
        );
        return;
    }
    // Every quota must leave the lowest class at least one unit.
    let capacities = [
        ("rate", q.rate.map(|r| q.burst.unwrap_or(r.count()))),
        (
            "tokens",
            q.tokens.map(|t| q.tokens_burst.unwrap_or(t.count())),
        ),
        ("concurrency", q.concurrency.map(u64::from)),
    ];
    for (key, cap) in capacities {
        let Some(cap) = cap else { continue };
        if r.hold(cap, Priority::Batch) >= cap {
            err(
                "reserve",
                format!(
                    "keeps all of {key} (capacity {cap}) from batch calls: a reserve must \
                     leave the lowest class at least 1"
                ),
            );
        }
    }
}

/// The rules of the `[tenants]` table.
pub(super) fn check_tenants(t: &BTreeMap<String, TenantConfig>, errors: &mut Vec<ConfigError>) {
    for (id, c) in t {
        if c.weight == 0 || c.weight > MAX_WEIGHT {
            errors.push(ConfigError::new(
                super::section::join(&super::section::join("tenants", id), "weight"),
                format!("{}: must be between 1 and {MAX_WEIGHT}", c.weight),
            ));
        }
    }
}
