//! What a call does when a quota has no room: fail fast or wait ([`OnLimit`]).

/// What a call does when a quota has no room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLimit {
    /// Fail fast.
    #[default]
    Reject,
    /// Wait in FIFO order up to `max_wait`.
    Wait,
}

// === impl OnLimit ===

impl OnLimit {
    /// `"reject"` or `"wait"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Reject => "reject",
            Self::Wait => "wait",
        }
    }
}
