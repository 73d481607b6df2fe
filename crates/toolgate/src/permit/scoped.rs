//! The permit of an admission that borrows its tool's handle ([`ScopedPermit`]).

use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Nanos;
use crate::tool::ToolRuntime;
use crate::vocab::Completion;

use super::Permit;

/// A permit that borrows the [`ToolHandle`](crate::ToolHandle) it came from instead
/// of sharing ownership of the tool, as `tokio`'s `SemaphorePermit` borrows its
/// semaphore: no reference count is touched, so on the fast path (a tool with one
/// request bucket) admission and release are one compare-and-swap and a few plain
/// stores. From [`ToolHandle::try_admit_scoped`](crate::ToolHandle::try_admit_scoped);
/// otherwise it behaves exactly like a [`Permit`] (and wraps one when the general
/// path admitted the call).
///
/// # Examples
///
/// ```
/// use toolgate::{Call, Completion, Engine, Policy};
///
/// let engine = Engine::new(Policy::from_toml_str("[tools.t]\nrate = \"1/h\"").unwrap());
/// let t = engine.tool("t");
/// let permit = t.try_admit_scoped(&Call::new("t")).unwrap();
/// assert!(t.try_admit_scoped(&Call::new("t")).is_err());
/// permit.complete(Completion::success());
/// ```
#[must_use = "a permit releases its quota when dropped"]
pub struct ScopedPermit<'a> {
    inner: Scoped<'a>,
}

enum Scoped<'a> {
    /// Admitted by the fast path, or in its tenant's slot while no gate had a say:
    /// holds nothing but the count of the call, and the tenant's key for the
    /// signals its completion may carry (see [`Permit::set_tenant`]).
    Fast {
        tool: &'a Arc<ToolRuntime>,
        admitted_at: Nanos,
        tenant: Option<NonZeroU64>,
    },
    Owned(Box<Permit>),
    /// Turned into an owned permit.
    Moved,
}

// === impl ScopedPermit ===

impl<'a> ScopedPermit<'a> {
    /// A scoped permit of a call the fast path admitted at `admitted_at`.
    #[inline]
    pub(crate) fn fast(tool: &'a Arc<ToolRuntime>, admitted_at: Nanos) -> Self {
        Self {
            inner: Scoped::Fast {
                tool,
                admitted_at,
                tenant: None,
            },
        }
    }

    /// A scoped permit of a call its tenant's slot admitted at `admitted_at` while
    /// no gate had a say ([`ToolRuntime::try_admit_quiet`]), with the tenant's key
    /// for its signals, if the tool keeps them per tenant.
    #[inline]
    pub(crate) fn quiet(
        tool: &'a Arc<ToolRuntime>,
        admitted_at: Nanos,
        tenant: Option<u64>,
    ) -> Self {
        Self {
            inner: Scoped::Fast {
                tool,
                admitted_at,
                tenant: tenant.and_then(NonZeroU64::new),
            },
        }
    }

    /// A scoped permit wrapping a permit the general path admitted.
    pub(crate) fn owned(permit: Permit) -> Self {
        Self {
            inner: Scoped::Owned(Box::new(permit)),
        }
    }

    /// The tool's name, or `None` for a tool without a policy.
    pub fn tool(&self) -> Option<&str> {
        match &self.inner {
            Scoped::Fast { tool, .. } => Some(&tool.name),
            Scoped::Owned(p) => p.tool(),
            Scoped::Moved => None,
        }
    }

    /// When the call was admitted, on the engine's clock.
    pub fn admitted_at(&self) -> Nanos {
        match &self.inner {
            Scoped::Fast { admitted_at, .. } => *admitted_at,
            Scoped::Owned(p) => p.admitted_at(),
            Scoped::Moved => 0,
        }
    }

    /// How long the call waited for admission (never, on the fast path).
    pub fn waited(&self) -> Duration {
        match &self.inner {
            Scoped::Fast { .. } | Scoped::Moved => Duration::ZERO,
            Scoped::Owned(p) => p.waited(),
        }
    }

    /// Ends the call, as [`Permit::complete`].
    #[inline]
    pub fn complete(self, completion: Completion) {
        // `end` takes everything out; with no drop to follow, nothing reads what it
        // leaves behind, so that store can go.
        std::mem::ManuallyDrop::new(self).end(Some(completion));
    }

    /// An owned [`Permit`] for the same admission, to keep beyond the handle.
    pub fn into_owned(mut self) -> Permit {
        match std::mem::replace(&mut self.inner, Scoped::Moved) {
            Scoped::Fast {
                tool,
                admitted_at,
                tenant,
            } => {
                let mut p = Permit::immediate(Some(tool.clone()), admitted_at);
                p.tenant = tenant;
                p
            }
            Scoped::Owned(p) => *p,
            Scoped::Moved => unreachable!("a permit is moved out only once, by value"),
        }
    }

    #[inline(always)]
    fn end(&mut self, completion: Option<Completion>) {
        match std::mem::replace(&mut self.inner, Scoped::Moved) {
            Scoped::Fast { tool, tenant, .. } => tool.end_call(completion, false, tenant),
            Scoped::Owned(p) => end_owned(p, completion),
            Scoped::Moved => {}
        }
    }
}

/// The end of a permit the general path admitted, out of line so that the fast
/// path's end stays small enough to inline (the box is taken by value so that
/// freeing it is out of line too).
#[inline(never)]
#[allow(clippy::boxed_local)]
fn end_owned(p: Box<Permit>, completion: Option<Completion>) {
    match completion {
        Some(c) => p.complete(c),
        None => drop(p),
    }
}

impl Drop for ScopedPermit<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.end(None);
    }
}

impl fmt::Debug for ScopedPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopedPermit")
            .field("tool", &self.tool())
            .field("admitted_at", &self.admitted_at())
            .field("waited", &self.waited())
            .finish_non_exhaustive()
    }
}
