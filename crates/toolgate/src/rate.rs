//! The pure quota algorithms: a token bucket in exact integer GCRA form, and an exact
//! sliding-window log.
//!
//! Both answer the same two questions for the engine: *when* could a call of a given
//! cost conform at the earliest, and what is the state after charging it at a given
//! time. Neither reads a clock, locks or allocates beyond its own log, so the same
//! code runs under the engine's locks, inside model checks and in property tests.

mod bucket;
mod sliding;

pub(crate) use bucket::{Gcra, Tat, WordCharge, WordForm};
pub(crate) use sliding::{SlidingLog, SlidingWindow};
