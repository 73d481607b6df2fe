//! Where a retired cell's state went ([`Successor`]): a reload that changes a quota
//! moves each cell's state into a new cell and leaves the old one pointing to it, so
//! that what comes late to the old cell (a token estimate reconciled after the
//! reload) follows the chain of reloads to the cell in force.
//!
//! The chain is generic over the cell it links (`C`: in the engine, its cells) and
//! asks of it only its own successor ([`Retirable`]).

use std::sync::{Arc, Weak};

use super::def::QuotaDef;
use super::partitions::{Home, Instance};
use crate::clock::Nanos;

/// A cell that a link can lead to, and that a reload may have retired in turn.
pub(crate) trait Retirable: Instance + Sized {
    /// The link its state holds once a reload retired it (`None` while it is live);
    /// takes its lock.
    fn successor(&self) -> Option<Successor<Self>>;
}

/// The cell that carries a retired cell's state, and its definition.
#[derive(Debug)]
pub(crate) struct Successor<C> {
    pub(crate) cell: Link<C>,
    pub(crate) def: QuotaDef,
}

/// How a retired cell refers to its successor.
#[derive(Debug)]
pub(crate) enum Link<C> {
    /// An unpartitioned quota's cell, held strongly: a retired cell lives only while
    /// something from before the reload (a permit) still refers to it, and its
    /// successor must outlive it.
    Strong(Arc<C>),
    /// A tenant partition, held weakly: the link must not keep the new partition
    /// from being evicted. Once it is gone (evicted when idle, or replaced by a
    /// further reload whose partitions dropped it), the tenant's partition now is
    /// found by its key where the quota's partitions live now.
    Tenant {
        cell: Weak<C>,
        key: Box<str>,
        home: Arc<Home<C>>,
    },
}

// === impl Successor ===

impl<C: Retirable> Successor<C> {
    /// The live cell at the end of the chain of reloads since, with its definition;
    /// `None` when the quota is gone from the policy in force. Takes one lock at a
    /// time.
    pub(crate) fn follow(self, now: Nanos) -> Option<(Arc<C>, QuotaDef)> {
        let (mut cell, mut def) = self.resolve(now)?;
        loop {
            let next = cell.successor();
            match next {
                Some(n) => (cell, def) = n.resolve(now)?,
                None => return Some((cell, def)),
            }
        }
    }

    /// The cell this link leads to, with its definition: a tenant's partition that
    /// is gone is looked up (or created) by its key where the quota's partitions live
    /// now, under the definition in force.
    fn resolve(self, now: Nanos) -> Option<(Arc<C>, QuotaDef)> {
        match self.cell {
            Link::Strong(cell) => Some((cell, self.def)),
            Link::Tenant { cell, key, home } => match cell.upgrade() {
                Some(cell) => Some((cell, self.def)),
                None => home.partition(&key, now),
            },
        }
    }
}

impl<C> Clone for Successor<C> {
    fn clone(&self) -> Self {
        Self {
            cell: self.cell.clone(),
            def: self.def.clone(),
        }
    }
}

// === impl Link ===

impl<C> Clone for Link<C> {
    fn clone(&self) -> Self {
        match self {
            Self::Strong(cell) => Self::Strong(cell.clone()),
            Self::Tenant { cell, key, home } => Self::Tenant {
                cell: cell.clone(),
                key: key.clone(),
                home: home.clone(),
            },
        }
    }
}
