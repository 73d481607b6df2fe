//! What every task of a running mesh shares.

use std::sync::Arc;

use toolgate::Engine;

use crate::claims::Claims;
use crate::config::MeshConfig;
use crate::executor::Executor;
use crate::outbox::Outbox;
use crate::stats::Stats;
use crate::streams::Streams;

/// The connected mesh's parts.
pub(crate) struct Shared {
    pub(crate) config: MeshConfig,
    pub(crate) engine: Engine,
    pub(crate) executor: Arc<dyn Executor>,
    pub(crate) claims: Claims,
    pub(crate) outbox: Outbox,
    pub(crate) stats: Arc<Stats>,
    pub(crate) streams: Streams,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
