//! One quota of a compiled policy: its definition (what it limits and how) and its
//! live state (one cell, or one cell per tenant partition).
//!
//! A cell holds the limiter state plus, only while someone waits, the pending
//! reservations of waiters and the queue of concurrency waiters. Everything on a
//! cell's state is called with the cell's lock held; the engine decides the order of
//! locks.
//!
//! One concept per file, each using only those listed before it:
//!
//! - `def`: a quota's definition ([`QuotaDef`], [`Kind`], [`CostOf`]);
//! - `waiters`: what a cell keeps of the calls waiting on it ([`ConcWaiter`] and the
//!   reservations);
//! - `fast`: the one-word form of an unpartitioned bucket ([`FastBucket`]);
//! - `partitions`: per-tenant instances with bounded memory, a bucket's kept in
//!   its slot as one word while nothing needs more ([`Inline`]: a call decided
//!   there; [`NoPartition`]: why none was handed out);
//! - `successor`: where a retired cell's state went;
//! - `limiter`: what an instance has used ([`Limiter`]);
//! - `cell`: the instance, its lock and its state ([`Cell`], [`CellGuard`],
//!   [`CellState`], [`Fit`]);
//! - `slot`: the quota itself ([`Quota`], [`Slot`]) and how a reload carries its
//!   state over.
//!
//! Why three of them are generic over the cell (`Partitions<C>`, `Successor<C>`,
//! `Limiter<C>`, always with `C = Cell`): the types are recursive — a cell holds a
//! limiter, a retired limiter links to the cell that carries its state on, and a
//! tenant's link finds that cell again through its quota's partitions, which hold
//! cells. With the cell a parameter, each file names only those below it, and the
//! code compiled is the same.

mod cell;
mod def;
mod fast;
mod limiter;
mod partitions;
mod slot;
mod successor;
mod waiters;

pub(crate) use crate::vocab::CostOf;
pub(crate) use cell::{Cell, CellGuard, CellState, Fit};
pub(crate) use def::{Kind, QuotaDef};
pub(crate) use fast::FastBucket;
pub(crate) use limiter::Limiter;
pub(crate) use partitions::{Inline, Instance, NoPartition};
pub(crate) use slot::{Quota, Slot};
pub(crate) use waiters::ConcWaiter;
