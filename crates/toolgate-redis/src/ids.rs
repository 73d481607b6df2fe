//! Unique admission ids: they name the members an admission adds to Redis' sorted
//! sets (leases, sliding-window entries), so they must not collide across processes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A per-process random prefix and a counter.
#[derive(Debug)]
pub(crate) struct Ids {
    prefix: String,
    next: AtomicU64,
    /// The id of an admission that adds no member anywhere (see [`Ids::none`]).
    none: Arc<str>,
}

// === impl Ids ===

impl Ids {
    pub(crate) fn new() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(
            std::time::SystemTime::UNIX_EPOCH
                .elapsed()
                .map_or(0, |d| d.as_nanos()),
        );
        Self {
            prefix: format!("{:012x}", h.finish() & 0xffff_ffff_ffff),
            next: AtomicU64::new(0),
            none: Arc::from(""),
        }
    }

    /// The id of an admission that adds no member to any sorted set (buckets
    /// alone): empty, shared, so that the most common admission allocates none.
    pub(crate) fn none(&self) -> Arc<str> {
        self.none.clone()
    }

    pub(crate) fn next(&self) -> String {
        format!(
            "{}-{:x}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }
}
