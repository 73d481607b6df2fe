//! The engine's own "no" to a call, before a caller is told ([`Denial`]).

use crate::clock::Nanos;
use crate::vocab::Rejection;

/// The engine's own "no" to a call, before a caller is told: the [`Rejection`] it
/// would be told, with what only the engine acts on — when the rate and token
/// quotas would conform, whether waiting can help, and whether the answer is no
/// answer at all because a reload retired a cell of the plan. It is not a second kind
/// of refusal: a caller only ever sees its rejection (`ToolRuntime::refuse`), and
/// every path that does not admit (try, wait, the gates) says it with this one type.
#[derive(Debug)]
pub(crate) struct Denial {
    pub(crate) rejection: Rejection,
    /// The earliest conforming time of the rate and token quotas.
    pub(crate) at: Nanos,
    /// Whether waiting can help.
    pub(crate) can_wait: bool,
    /// A reload retired a cell of the call's plan: start over on the policy now in
    /// force (the rejection is not an answer then).
    pub(crate) stale: bool,
}

// === impl Denial ===

impl Denial {
    /// The answer when a reload retired a cell of the plan: not a rejection, a retry.
    pub(crate) fn stale(placeholder: Rejection) -> Self {
        Self {
            rejection: placeholder,
            at: 0,
            can_wait: false,
            stale: true,
        }
    }

    /// A refusal that waiting cannot change, decided at `now`.
    pub(crate) fn final_at(rejection: Rejection, now: Nanos) -> Self {
        Self {
            rejection,
            at: now,
            can_wait: false,
            stale: false,
        }
    }

    /// A refusal that waiting can outlast: every quota (or gate) conforms at `at`.
    pub(crate) fn until(rejection: Rejection, at: Nanos) -> Self {
        Self {
            rejection,
            at,
            can_wait: true,
            stale: false,
        }
    }
}

impl From<Rejection> for Denial {
    /// A rejection that waiting cannot change (`at` is then never read).
    fn from(rejection: Rejection) -> Self {
        Self {
            rejection,
            at: 0,
            can_wait: false,
            stale: false,
        }
    }
}
