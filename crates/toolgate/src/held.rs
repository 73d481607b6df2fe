//! What an admitted call keeps until its permit is built ([`Admission`]) and of the
//! quotas it was charged on until it ends ([`Held`], [`HeldParts`]).

use std::sync::Arc;

use crate::clock::Nanos;
use crate::quota::{Cell, Quota, Slot};
use crate::sync::Mutex;

/// What a permit keeps: inline for up to two parts (a token budget and a
/// concurrency slot), so admission does not allocate.
pub(crate) type HeldParts = smallvec::SmallVec<[Held; 2]>;

/// A part of a quota a permit keeps until the call ends: concurrency to release, or a
/// token estimate to reconcile.
#[derive(Debug)]
pub(crate) struct Held {
    /// The quota's place in the tool's quotas (`ToolRuntime::quotas`): the permit
    /// keeps the tool, which keeps the quota, so no reference count is taken.
    pub(crate) index: usize,
    /// The tenant partition's cell; `None` for an unpartitioned quota, whose one
    /// cell the quota holds (no second reference count to take and give back).
    pub(crate) partition: Option<Arc<Cell>>,
    pub(crate) cost: u64,
    /// For the parts of one reservation charged together on a bucket: the refill
    /// (in the bucket's units) that parts given back before have already kept back,
    /// shared so that giving back every part keeps the refill back once (see
    /// `Permit::cancel`). `None`: the part is the whole charge.
    pub(crate) kept: Option<Arc<Mutex<u128>>>,
}

/// A call the kernel admitted, before its permit is built (the permit, above the
/// tool, keeps the tool): what it keeps, when it was admitted, whether it is a
/// half-open probe of the breaker, and its tenant's key on a tool with per-tenant
/// upstream signals.
#[derive(Debug)]
pub(crate) struct Admission {
    pub(crate) held: HeldParts,
    pub(crate) at: Nanos,
    pub(crate) probe: bool,
    pub(crate) tenant: Option<u64>,
}

// === impl Admission ===

impl Admission {
    /// A call admitted at `at` keeping `held`.
    #[inline]
    pub(crate) fn new(held: HeldParts, at: Nanos) -> Self {
        Self {
            held,
            at,
            probe: false,
            tenant: None,
        }
    }

    /// A call admitted at `at` that keeps nothing (the fast path).
    #[inline(always)]
    pub(crate) fn immediate(at: Nanos) -> Self {
        Self::new(HeldParts::new(), at)
    }
}

// === impl Held ===

impl Held {
    /// The quota of the part, among `quotas` (those of the tool whose permit keeps
    /// it).
    #[inline]
    pub(crate) fn quota<'t>(&self, quotas: &'t [Arc<Quota>]) -> &'t Arc<Quota> {
        &quotas[self.index]
    }

    /// The cell the part was charged to, of `quota` (its [`Held::quota`]).
    pub(crate) fn cell<'a>(&'a self, quota: &'a Quota) -> &'a Arc<Cell> {
        match (&self.partition, &quota.slot) {
            (Some(cell), _) | (None, Slot::Single(cell)) => cell,
            (None, Slot::Partitioned(_)) => {
                unreachable!("a part of a partitioned quota keeps its partition's cell")
            }
        }
    }
}
