//! The local parts of a call that a shared store has not admitted yet.

use crate::store::StoreLease;
use crate::vocab::Priority;

use super::Permit;

/// The local permit of a call while the store decides it: it becomes the call's
/// permit when the store admits it, and goes back as never admitted (not counted
/// in flight, in or out) when the store refuses it or its caller gives up while the
/// store decides.
#[derive(Debug)]
pub(crate) struct Unadmitted(Option<Permit>);

// === impl Unadmitted ===

impl Unadmitted {
    pub(crate) fn new(local: Permit) -> Self {
        Self(Some(local))
    }

    /// The call's permit, now that the store keeps `lease` for it.
    pub(crate) fn admitted(self, lease: Box<dyn StoreLease>, p: Priority) -> Permit {
        self.unstored().with_lease(lease, p)
    }

    /// Whether the call is of a tool with a policy (the store sees only those).
    pub(crate) fn has_tool(&self) -> bool {
        self.0.as_ref().is_some_and(|p| p.tool().is_some())
    }

    /// The local permit as it is, for a call the store never saw (a tool without a
    /// policy) or has no lease for.
    pub(crate) fn unstored(mut self) -> Permit {
        match self.0.take() {
            Some(local) => local,
            None => unreachable!("taken only here, by value, and in drop"),
        }
    }
}

impl Drop for Unadmitted {
    fn drop(&mut self) {
        if let Some(local) = self.0.take() {
            local.discard();
        }
    }
}
