//! Whether decisions are enforced or only observed ([`Mode`]).

/// Whether decisions are enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// Rejections are enforced.
    #[default]
    Enforce,
    /// Every decision is computed, logged and counted, but never enforced.
    Shadow,
}

// === impl Mode ===

impl Mode {
    /// `"enforce"` or `"shadow"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Enforce => "enforce",
            Self::Shadow => "shadow",
        }
    }
}
