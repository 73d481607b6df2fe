//! The policy in force and its reloads ([`Live`]): what an [`crate::Engine`] handle
//! shares, and what every admission verb starts from.
//!
//! A reload compiles the new policy against the old one's state and swaps it in; a
//! call that found a cell of its plan retired by a reload waits for the reload to end
//! ([`Live::await_reload`], or [`Live::reload_done`] for async callers) and starts
//! over on the new policy.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::clock::Clock;
use crate::compiled::Compiled;
use crate::policy::Policy;
use crate::recent;
use crate::shared::Shared;
use crate::store::QuotaStore;
use crate::sync::{Mutex, MutexGuard, Swap, SwapGuard};
use crate::tool::ToolRuntime;

/// A stamp no policy of any engine in this process had before (see `Live::stamp`).
fn next_stamp() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The state behind an engine: what its tools share, the policy in force, and the
/// reloads that replace it.
#[derive(Debug)]
pub(crate) struct Live {
    pub(crate) shared: Arc<Shared>,
    compiled: Swap<Compiled>,
    reload: Mutex<()>,
    /// Whether a reload is under way, and the async callers waiting for it to end.
    reloading: Mutex<Reloading>,
    /// The policy in force's stamp ([`Live::stamp`]).
    stamp: AtomicU64,
}

/// A reload under way, as async callers that must start over on its policy see it.
#[derive(Debug, Default)]
struct Reloading {
    running: bool,
    waiters: Vec<Waker>,
}

/// Holds the reload lock; marks the reload as under way until dropped, and then
/// wakes the async callers that wait for it (on every exit, errors included).
struct ReloadGuard<'a> {
    live: &'a Live,
    _serial: MutexGuard<'a, ()>,
}

/// Resolves once no reload is under way, without blocking the thread (see
/// [`Live::reload_done`]).
struct ReloadDone<'a> {
    live: &'a Live,
}

// === impl Live ===

impl Live {
    /// `policy` in force on `clock`, its quotas in `store` or in memory.
    pub(crate) fn new(
        policy: Policy,
        clock: Arc<dyn Clock>,
        store: Option<Arc<dyn QuotaStore>>,
    ) -> Self {
        let shared = Arc::new(Shared::new(clock, store));
        let now = shared.clock.now();
        let compiled = Compiled::new(policy, &shared, None, now);
        Self {
            shared,
            compiled: Swap::new(compiled),
            reload: Mutex::new(()),
            reloading: Mutex::new(Reloading::default()),
            stamp: AtomicU64::new(next_stamp()),
        }
    }

    /// The policy in force, compiled.
    #[inline]
    pub(crate) fn compiled(&self) -> SwapGuard<Compiled> {
        self.compiled.load()
    }

    /// The stamp of the policy in force: new at every reload, and never given to
    /// another policy of this or any other engine in this process (an engine's
    /// address may be reused once it is dropped; a stamp is not). What a
    /// [`crate::ToolHandle`] notices a reload by, and what a thread's recent lookups
    /// ([`crate::recent`]) tell engines and policies apart by, in one compare.
    #[inline]
    pub(crate) fn stamp(&self) -> u64 {
        self.stamp.load(Ordering::Acquire)
    }

    /// The runtime of the tool named `name` in the policy in force, or that policy
    /// (to answer for a tool it does not have). Found first among this thread's
    /// recent lookups ([`crate::recent`]): one `Weak::upgrade` instead of a guarded
    /// read of the policy and a clone.
    #[inline(always)]
    pub(crate) fn tool(&self, name: &str) -> Result<Arc<ToolRuntime>, SwapGuard<Compiled>> {
        let key = crate::words::Key::of(name.as_bytes());
        // The stamp first: a tool found in the policy read after it is at least as
        // new as that stamp's policy, so the entry never outlives its policy.
        let stamp = self.stamp();
        match recent::get(stamp, &key, name) {
            Some(tool) => Ok(tool),
            None => self.look_up(key, stamp, name),
        }
    }

    /// [`Live::tool`] in the policy in force, remembered for this thread.
    #[inline(never)]
    fn look_up(
        &self,
        key: crate::words::Key,
        stamp: u64,
        name: &str,
    ) -> Result<Arc<ToolRuntime>, SwapGuard<Compiled>> {
        let compiled = self.compiled();
        match compiled.tools.get(name) {
            Some(tool) => {
                recent::put(stamp, key, tool);
                Ok(tool.clone())
            }
            None => Err(compiled),
        }
    }

    /// Waits for the reload in progress, if any, to put its policy in force: a call
    /// that found a cell of its plan retired by it then starts over on that policy.
    pub(crate) fn await_reload(&self) {
        drop(self.reload.lock());
    }

    /// As [`Live::await_reload`], for async callers: yields to the runtime instead
    /// of blocking its thread while the reload (which converts every partition of a
    /// changed quota) runs.
    pub(crate) fn reload_done(&self) -> impl Future<Output = ()> + '_ {
        ReloadDone { live: self }
    }

    /// Puts `policy` in force (in the store first, if any): quotas whose definition
    /// did not change keep their state, and the tools of the old policy are marked
    /// superseded.
    ///
    /// # Errors
    ///
    /// The store's message when it cannot run `policy` (the old one stays).
    pub(crate) fn try_apply(&self, policy: Policy) -> Result<(), String> {
        let _serial = ReloadGuard::new(self);
        if let Some(store) = &self.shared.store {
            store.apply(&policy)?;
        }
        let old = self.compiled.load_full();
        let now = self.shared.clock.now();
        let new = Compiled::new(policy, &self.shared, Some(&old), now);
        self.compiled.store(Arc::new(new));
        self.stamp.store(next_stamp(), Ordering::Release);
        for tool in old.tools.values() {
            tool.superseded.store(true, Ordering::Release);
        }
        Ok(())
    }
}

// === impl ReloadGuard ===

impl<'a> ReloadGuard<'a> {
    fn new(live: &'a Live) -> Self {
        let serial = live.reload.lock();
        live.reloading.lock().running = true;
        Self {
            live,
            _serial: serial,
        }
    }
}

impl Drop for ReloadGuard<'_> {
    fn drop(&mut self) {
        let waiters = {
            let mut r = self.live.reloading.lock();
            r.running = false;
            std::mem::take(&mut r.waiters)
        };
        waiters.into_iter().for_each(Waker::wake);
    }
}

// === impl ReloadDone ===

impl Future for ReloadDone<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut r = self.live.reloading.lock();
        if !r.running {
            return Poll::Ready(());
        }
        if !r.waiters.iter().any(|w| w.will_wake(cx.waker())) {
            r.waiters.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::task::Poll;

    use crate::{Engine, Policy};

    use super::*;

    #[test]
    fn an_async_caller_waits_for_a_reload_without_blocking_its_thread() {
        let engine = Engine::new(Policy::from_toml_str("[tools.t]\nrate = \"1/s\"").unwrap());
        let live = engine.live();
        let mut done = tokio_test::task::spawn(live.reload_done());
        // No reload under way: ready at once.
        assert_eq!(done.poll(), Poll::Ready(()));

        let mut done = tokio_test::task::spawn(live.reload_done());
        let reload = ReloadGuard::new(live);
        // Under way: pending (the thread is free for other tasks), then woken once
        // the reload ends, on every exit of `try_apply` alike.
        assert_eq!(done.poll(), Poll::Pending);
        assert_eq!(done.poll(), Poll::Pending);
        assert!(!done.is_woken());
        drop(reload);
        assert!(done.is_woken());
        assert_eq!(done.poll(), Poll::Ready(()));
    }
}
