//! What happens to calls for tools that have no policy ([`UnknownTools`]).

/// What happens to calls for tools without a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownTools {
    /// Admit them without any accounting.
    #[default]
    Allow,
    /// Reject them with `unknown_tool`.
    Deny,
}
