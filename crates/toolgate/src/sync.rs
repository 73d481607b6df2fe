//! The synchronisation primitives the engine uses, swappable for loom's model-checked
//! versions (`RUSTFLAGS="--cfg loom"`), as tokio does in its own `loom` module.

#[cfg(not(loom))]
mod imp {
    pub(crate) use parking_lot::{Mutex, MutexGuard};
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::Arc;

    /// The policy in force: read on every admission without contention, replaced
    /// on reload.
    #[derive(Debug)]
    pub(crate) struct Swap<T>(arc_swap::ArcSwap<T>);
    pub(crate) type SwapGuard<T> = arc_swap::Guard<Arc<T>>;

    impl<T> Swap<T> {
        pub(crate) fn new(t: T) -> Self {
            Self(arc_swap::ArcSwap::from_pointee(t))
        }

        pub(crate) fn load(&self) -> SwapGuard<T> {
            self.0.load()
        }

        pub(crate) fn load_full(&self) -> Arc<T> {
            self.0.load_full()
        }

        pub(crate) fn store(&self, t: Arc<T>) {
            self.0.store(t);
        }
    }
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64};

    use std::sync::Arc;

    /// Under loom the policy cell is a plain lock around an `Arc`, which loom can
    /// model (arc-swap's thread-local debts assume real threads).
    #[derive(Debug)]
    pub(crate) struct Swap<T>(Mutex<Arc<T>>);
    pub(crate) type SwapGuard<T> = Arc<T>;

    impl<T> Swap<T> {
        pub(crate) fn new(t: T) -> Self {
            Self(Mutex::new(Arc::new(t)))
        }

        pub(crate) fn load(&self) -> Arc<T> {
            self.0.lock().clone()
        }

        pub(crate) fn load_full(&self) -> Arc<T> {
            self.load()
        }

        pub(crate) fn store(&self, t: Arc<T>) {
            *self.0.lock() = t;
        }
    }

    /// loom's mutex with parking_lot's non-poisoning `lock()`.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);
    pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) fn new(t: T) -> Self {
            Self(loom::sync::Mutex::new(t))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            match self.0.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            }
        }
    }
}

pub(crate) use imp::*;
