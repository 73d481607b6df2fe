//! What a call that runs the tool is told when it does not succeed
//! ([`ExecuteError`]): not admitted, or failed in the tool.

use crate::vocab::Rejection;

/// The error of [`Engine::execute`](crate::Engine::execute) and
/// [`Engine::run`](crate::Engine::run): rejected before the tool ran, or failed in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecuteError<E> {
    /// The call was not admitted; the tool did not run.
    Rejected(Rejection),
    /// The tool ran and failed.
    Tool(E),
}

// === impl ExecuteError ===

impl<E: std::fmt::Display> std::fmt::Display for ExecuteError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Rejected(r) => write!(f, "{r}"),
            Self::Tool(e) => write!(f, "tool failed: {e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for ExecuteError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Rejected(r) => Some(r),
            Self::Tool(e) => Some(e),
        }
    }
}
