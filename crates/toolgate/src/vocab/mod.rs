//! The words every layer of the engine speaks, from the config's compiler to the
//! decision and the permit: what a call asks for ([`Call`]), what it is told when the
//! answer is no ([`Rejection`], [`Reason`]), how it ended ([`Outcome`],
//! [`Completion`], [`ExecuteError`]), the quotas' words ([`Rate`], [`Window`], [`Partition`]), the
//! policy's switches ([`Mode`], [`OnLimit`], [`UnknownTools`]) and the bounds the
//! decision reads ([`MAX_WAIT_LIMIT`] and the others in `limits`).
//!
//! Vocabulary sits below everything but the primitives (`sync`, `clock`): the config
//! parser imports it, never the reverse, so that the decision path names nothing of
//! the parser's. The public paths are `toolgate::{Call, Completion, Outcome, Reason,
//! Rejection}` and `toolgate::config::{Mode, OnLimit, Window, Partition,
//! UnknownTools, Rate, MAX_COUNT, MAX_WAIT_LIMIT, …}` (re-exports).

mod call;
mod completion;
mod cost_of;
mod duration;
mod execute_error;
mod fairness;
mod limits;
mod mode;
mod on_limit;
mod outcome;
mod partition;
mod priority;
mod rate;
mod reason;
mod rejection;
mod unknown_tools;
mod window;

pub use call::Call;
pub use completion::Completion;
pub use cost_of::CostOf;
pub use execute_error::ExecuteError;
pub(crate) use fairness::MAX_RESERVE;
pub use fairness::{Fairness, Reserve};
pub use limits::{DEFAULT_MAX_PARTITIONS, DEFAULT_MAX_PAUSE, MAX_PAUSE_LIMIT, MAX_WAIT_LIMIT};
pub use mode::Mode;
pub use on_limit::OnLimit;
pub use outcome::Outcome;
pub use partition::Partition;
pub use priority::{Priority, UnknownPriority};
pub use rate::{Rate, MAX_COUNT};
pub use reason::Reason;
pub(crate) use rejection::QuotaNames;
pub use rejection::Rejection;
pub use unknown_tools::UnknownTools;
pub use window::Window;

pub(crate) use duration::{format_duration, parse_duration};
