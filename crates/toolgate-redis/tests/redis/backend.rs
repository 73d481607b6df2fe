//! One semantic suite, two backends: the in-memory `Engine`, and the engine on Redis
//! (on one server or a cluster), the crate's one front door; both driven by a
//! `ManualClock`.

#![allow(async_fn_in_trait)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use toolgate::{Call, Completion, Engine, ManualClock, Permit, Policy, Rejection, ToolState};
use toolgate_redis::Builder;

use crate::support::{prefix, redis_available, store, RedisServer};

/// Admission as the suite sees it.
pub trait Backend: Clone + Send + Sync + 'static {
    type Permit: Send + std::fmt::Debug + 'static;
    async fn try_admit(&self, call: &Call<'_>) -> Result<Self::Permit, Rejection>;
    async fn admit(&self, call: &Call<'_>) -> Result<Self::Permit, Rejection>;
    async fn try_admit_all(&self, calls: &[Call<'_>]) -> Result<Vec<Self::Permit>, Rejection>;
    async fn complete(&self, permit: Self::Permit, completion: Completion);
    /// Gives back an unused part of a reservation (and lets it land).
    async fn cancel(&self, permit: Self::Permit);
    /// Lets a dropped permit's release land (Redis releases in a spawned task).
    async fn settle(&self);
    fn waited(permit: &Self::Permit) -> Duration;
    fn clock(&self) -> &ManualClock;
    /// The tool's state, with what each quota has left read where it lives.
    async fn state(&self, tool: &str, tenant: Option<&str>) -> Option<ToolState>;
    /// Every tool's state, read at once.
    async fn states(&self, tenant: Option<&str>) -> Vec<ToolState>;
}

/// Makes a backend for a policy.
pub trait Factory {
    type B: Backend;
    async fn make(&self, toml: &str) -> Self::B;
}

fn policy(toml: &str) -> Policy {
    Policy::from_toml_str(toml).expect("valid policy")
}

// === memory ===

#[derive(Debug, Clone)]
pub struct Memory {
    engine: Engine,
    clock: ManualClock,
}

#[derive(Debug, Default)]
pub struct MemoryFactory;

impl Factory for MemoryFactory {
    type B = Memory;
    async fn make(&self, toml: &str) -> Memory {
        let clock = ManualClock::new();
        clock.advance(Duration::from_secs(1000));
        let engine = Engine::with_clock(policy(toml), Arc::new(clock.clone()));
        Memory { engine, clock }
    }
}

impl Backend for Memory {
    type Permit = Permit;
    async fn try_admit(&self, call: &Call<'_>) -> Result<Permit, Rejection> {
        self.engine.try_admit(call)
    }
    async fn admit(&self, call: &Call<'_>) -> Result<Permit, Rejection> {
        self.engine.admit(call).await
    }
    async fn try_admit_all(&self, calls: &[Call<'_>]) -> Result<Vec<Permit>, Rejection> {
        self.engine.try_admit_all(calls)
    }
    async fn complete(&self, permit: Permit, completion: Completion) {
        permit.complete(completion);
    }
    async fn cancel(&self, permit: Permit) {
        permit.cancel();
    }
    async fn settle(&self) {}
    fn waited(permit: &Permit) -> Duration {
        permit.waited()
    }
    fn clock(&self) -> &ManualClock {
        &self.clock
    }
    async fn state(&self, tool: &str, tenant: Option<&str>) -> Option<ToolState> {
        self.engine.fetch_tool_state(tool, tenant).await
    }
    async fn states(&self, tenant: Option<&str>) -> Vec<ToolState> {
        self.engine.fetch_tool_states(tenant).await
    }
}

// === an engine on redis ===

/// A `toolgate::Engine` whose quotas live in Redis (`Engine::with_store`): what
/// the gateway and the Python package run with `--store redis://…`.
#[derive(Debug, Clone)]
pub struct EngineOnRedis {
    pub engine: Engine,
    clock: ManualClock,
}

/// Engines on one Redis (a server or a cluster), each with its own key prefix.
#[derive(Debug)]
pub struct RedisFactory {
    pub url: String,
    pub lease_ttl: Duration,
    pub seq: AtomicU64,
    /// The server, when this factory started it.
    pub server: Option<RedisServer>,
}

impl RedisFactory {
    pub fn new(url: String) -> Self {
        Self {
            url,
            lease_ttl: Duration::from_secs(60),
            seq: AtomicU64::new(0),
            server: None,
        }
    }

    /// A factory on a fresh server of its own; `None` when Redis tests are skipped.
    pub fn local() -> Option<Self> {
        if !redis_available() {
            return None;
        }
        let server = RedisServer::start();
        let mut f = Self::new(server.url());
        f.server = Some(server);
        Some(f)
    }
}

impl Factory for RedisFactory {
    type B = EngineOnRedis;
    async fn make(&self, toml: &str) -> EngineOnRedis {
        let clock = ManualClock::new();
        clock.advance(Duration::from_secs(1000));
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        // Semantics, not timeouts, are tested here: a generous timeout for loaded CI.
        let store = store(&self.url, &prefix(&format!("eng{n}")), "timeout = \"5s\"");
        let engine = Builder::new(policy(toml), store)
            .clock(Arc::new(clock.clone()))
            .lease_ttl(self.lease_ttl)
            .engine()
            .await
            .expect("connect");
        EngineOnRedis { engine, clock }
    }
}

impl Backend for EngineOnRedis {
    type Permit = Permit;
    async fn try_admit(&self, call: &Call<'_>) -> Result<Permit, Rejection> {
        self.engine.admit_now(call).await
    }
    async fn admit(&self, call: &Call<'_>) -> Result<Permit, Rejection> {
        self.engine.admit(call).await
    }
    async fn try_admit_all(&self, calls: &[Call<'_>]) -> Result<Vec<Permit>, Rejection> {
        self.engine.admit_all(calls).await
    }
    async fn complete(&self, permit: Permit, completion: Completion) {
        // The store's round trip runs in the background: let it land.
        permit.complete(completion);
        self.settle().await;
    }
    async fn cancel(&self, permit: Permit) {
        permit.cancel();
        self.settle().await;
    }
    async fn settle(&self) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fn waited(permit: &Permit) -> Duration {
        permit.waited()
    }
    fn clock(&self) -> &ManualClock {
        &self.clock
    }
    async fn state(&self, tool: &str, tenant: Option<&str>) -> Option<ToolState> {
        self.engine.fetch_tool_state(tool, tenant).await
    }
    async fn states(&self, tenant: Option<&str>) -> Vec<ToolState> {
        self.engine.fetch_tool_states(tenant).await
    }
}
