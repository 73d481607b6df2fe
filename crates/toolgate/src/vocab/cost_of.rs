//! Which part of a call a quota is charged with.

/// Which part of a call a quota is charged with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CostOf {
    /// Its request count (`rate`, `concurrency`).
    Requests,
    /// Its token estimate (`tokens`), reconciled when the call completes.
    Tokens,
}
