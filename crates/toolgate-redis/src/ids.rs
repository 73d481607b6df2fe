//! Unique admission ids: they name the members an admission adds to Redis' sorted
//! sets (leases, sliding-window entries), so they must not collide across processes.

use std::sync::atomic::{AtomicU64, Ordering};

/// A per-process random prefix and a counter.
#[derive(Debug)]
pub(crate) struct Ids {
    prefix: String,
    next: AtomicU64,
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
        }
    }

    pub(crate) fn next(&self) -> String {
        format!(
            "{}-{:x}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }
}
