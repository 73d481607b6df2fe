//! The hash of a tenant's key ([`TenantHasher`]): one keyed hasher for the whole
//! process, shared by the partitions of every quota and the per-tenant signals of
//! every tool, so that a call decided in its tenant's slot hashes the tenant once,
//! and its signals' key is the hash its partition was found by.
//!
//! Keyed with a seed drawn once per process, because tenant keys are a client's
//! choice: without the seed nobody can pick keys that collide. One seed for every map
//! rather than one per map, so that a tenant's hash holds across maps and across
//! reloads (a reload converts a quota's partitions into a new map, and keeps each
//! tool's per-tenant signals, which are found by this hash).

use std::hash::{BuildHasher, Hasher};
use std::sync::LazyLock;

/// The process's tenant hasher. Every copy hashes alike; the maps that hash a
/// tenant on every call keep one, so that the call skips the check of the lazy
/// initialisation of the process's own.
#[derive(Debug, Clone)]
pub(crate) struct TenantHasher(hashbrown::DefaultHashBuilder);

/// The process's hasher (a random seed, drawn on first use).
static HASHER: LazyLock<TenantHasher> =
    LazyLock::new(|| TenantHasher(hashbrown::DefaultHashBuilder::default()));

// === impl TenantHasher ===

impl TenantHasher {
    /// A copy of the process's hasher.
    pub(crate) fn get() -> Self {
        HASHER.clone()
    }

    /// The hash of tenant `key`: its bytes alone (the hasher mixes in their length),
    /// not `str`'s `Hash`, which adds a terminator byte the one key hashed here never
    /// needs.
    #[inline]
    pub(crate) fn hash(&self, key: &str) -> u64 {
        let mut h = self.0.build_hasher();
        h.write(key.as_bytes());
        h.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every copy hashes a key alike (the partitions' and the signals' keys of one
    /// tenant agree), and different keys differently.
    #[test]
    fn every_copy_hashes_alike() {
        let (a, b) = (TenantHasher::get(), TenantHasher::get());
        for key in ["", "a", "tenant-1", "a much longer tenant key than most"] {
            assert_eq!(a.hash(key), b.hash(key));
        }
        assert_ne!(a.hash("tenant-1"), a.hash("tenant-2"));
    }
}
