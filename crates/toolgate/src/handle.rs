//! A tool resolved once ([`ToolHandle`]), for callers that admit the same tool in a
//! hot loop; the fastest admission, [`ToolHandle::try_admit_scoped`], starts here.

use std::sync::Arc;

use crate::admit;
use crate::clock::Nanos;
use crate::live::Live;
use crate::permit::{Permit, ScopedPermit};
use crate::tool::ToolRuntime;
use crate::vocab::{Call, Rejection};

/// A tool resolved once, for callers that admit the same tool in a hot loop: skips
/// the lookup by name. Follows policy reloads (it re-resolves when the policy
/// changes).
///
/// # Examples
///
/// ```
/// use toolgate::{Call, Engine, Policy};
///
/// let engine = Engine::new(Policy::from_toml_str("[tools.t]\nrate = \"1/h\"").unwrap());
/// let t = engine.tool("t");
/// assert!(t.try_admit(&Call::new("t")).is_ok());
/// assert!(t.try_admit(&Call::new("t")).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct ToolHandle {
    live: Arc<Live>,
    name: Arc<str>,
    cached: Option<(u64, Arc<ToolRuntime>)>,
}

// === impl ToolHandle ===

impl ToolHandle {
    /// A handle on `tool` in the policy in force in `live`.
    pub(crate) fn new(live: Arc<Live>, tool: &str) -> Self {
        let stamp = live.stamp();
        let cached = live.compiled().tools.get(tool).map(|t| (stamp, t.clone()));
        Self {
            live,
            name: tool.into(),
            cached,
        }
    }

    /// As [`Engine::try_admit`](crate::Engine::try_admit), for this handle's tool
    /// (the call's own tool name is not looked at).
    ///
    /// # Errors
    ///
    /// A [`Rejection`]; nothing was consumed.
    #[inline(always)]
    pub fn try_admit(&self, call: &Call<'_>) -> Result<Permit, Rejection> {
        // As `try_admit_scoped`: the fast path on the cached tool, with no stamp
        // check (a reload closes the fast path of the runtimes it replaced).
        if let Some((_, tool)) = &self.cached {
            let now = self.live.shared.now();
            if tool.try_admit_fast(call, now) {
                return Ok(Permit::immediate(Some(tool.clone()), now));
            }
            return self.try_admit_general(Some(now), call);
        }
        self.try_admit_general(None, call)
    }

    /// [`ToolHandle::try_admit`] past the fast path (tried on the cached tool at the
    /// time `tried`, if any: `None` only without a cached tool), out of line so that
    /// the fast path stays small enough to inline. A tool cached in an older
    /// policy (another stamp), or none, is looked up by name.
    #[inline(never)]
    fn try_admit_general(
        &self,
        tried: Option<Nanos>,
        call: &Call<'_>,
    ) -> Result<Permit, Rejection> {
        match (self.current(), tried) {
            (Some(tool), Some(now)) => admit::try_admit_past_fast(&self.live, tool, call, now),
            _ => admit::try_admit(
                &self.live,
                &Call {
                    tool: &self.name,
                    ..*call
                },
            ),
        }
    }

    /// As [`ToolHandle::try_admit`], with a permit that borrows this handle instead
    /// of sharing ownership of the tool (see [`ScopedPermit`]): the fastest way to
    /// admit a call that ends before the handle goes away.
    ///
    /// # Errors
    ///
    /// A [`Rejection`]; nothing was consumed.
    #[inline(always)]
    pub fn try_admit_scoped(&self, call: &Call<'_>) -> Result<ScopedPermit<'_>, Rejection> {
        // No stamp check here: a reload marks the runtimes it replaced as
        // superseded, which closes their fast path (the general path re-resolves).
        if let Some((_, tool)) = &self.cached {
            let now = self.live.shared.now();
            if tool.try_admit_fast(call, now) {
                return Ok(ScopedPermit::fast(tool, now));
            }
            return self.try_admit_scoped_general(Some(now), call);
        }
        self.try_admit_scoped_general(None, call)
    }

    /// [`ToolHandle::try_admit_scoped`] past the fast path (tried on the cached tool at
    /// the time `tried`, if any), out of line so that the fast path stays small enough to
    /// inline.
    #[inline(never)]
    fn try_admit_scoped_general<'a>(
        &'a self,
        tried: Option<Nanos>,
        call: &Call<'_>,
    ) -> Result<ScopedPermit<'a>, Rejection> {
        let ready = tried
            .and_then(|now| Some((self.current()?, now)))
            .filter(|_| self.live.shared.store.is_none());
        let Some((tool, now)) = ready else {
            return self.try_admit_general(tried, call).map(ScopedPermit::owned);
        };
        // As `ToolRuntime::try_admit_general`, except that a call its tenant's slot
        // admits while no gate has a say gets a permit that borrows the tool too (no
        // `Admission`, no box).
        let general = match tool.try_admit_quiet(call, now) {
            Ok(Some(tenant)) => return Ok(ScopedPermit::quiet(tool, now, tenant)),
            Ok(None) => tool.try_admit_gated(call, now),
            Err(d) => Err(d),
        };
        match general {
            Ok(a) => Ok(ScopedPermit::owned(Permit::admitted(tool.clone(), a))),
            Err(d) if !d.stale => Err(tool.refuse(d, call.tenant)),
            // A reload retired a cell of the plan: start over on the new policy.
            Err(_) => {
                self.live.await_reload();
                self.try_admit(call).map(ScopedPermit::owned)
            }
        }
    }

    /// The resolved tool, while the policy it was resolved in is still in force.
    #[inline]
    fn current(&self) -> Option<&Arc<ToolRuntime>> {
        match &self.cached {
            Some((stamp, tool)) if *stamp == self.live.stamp() => Some(tool),
            _ => None,
        }
    }
}
