//! Where a quota's tenant partitions live now ([`Home`]).

use std::sync::{Arc, Weak};

use super::{Instance, Partitions};
use crate::clock::Nanos;
use crate::quota::def::QuotaDef;
use crate::sync::Mutex;

/// Where a quota's tenant partitions live now. Every generation of one quota's
/// partitions shares it (a reload that converts them hands it on), so that a token
/// difference that comes late to a partition a reload retired finds the tenant's
/// partition under the policy in force, even after the partition it was converted
/// into is gone (evicted once idle, or replaced by a further reload).
#[derive(Debug)]
pub(crate) struct Home<C> {
    current: Mutex<Option<(Weak<Partitions<C>>, QuotaDef)>>,
}

// === impl Home ===

impl<C> Default for Home<C> {
    fn default() -> Self {
        Self {
            current: Mutex::new(None),
        }
    }
}

impl<C: Instance> Home<C> {
    /// Makes `parts` (defined by `def`) the partitions in force.
    pub(super) fn set(&self, parts: &Arc<Partitions<C>>, def: &QuotaDef) {
        *self.current.lock() = Some((Arc::downgrade(parts), def.clone()));
    }

    /// The partition of tenant `key` under the policy in force, with its definition:
    /// created afresh if it was evicted, as a call would create it. `None` when the
    /// quota is no longer partitioned in force, or no partition can be had now (all
    /// busy, or a reload is replacing them).
    pub(crate) fn partition(&self, key: &str, now: Nanos) -> Option<(Arc<C>, QuotaDef)> {
        let (parts, def) = {
            let current = self.current.lock();
            let (parts, def) = current.as_ref()?;
            (parts.upgrade()?, def.clone())
        };
        let cell = parts.get(key, &def, now).ok()?;
        Some((cell, def))
    }
}
