//! The synchronisation primitives the engine uses, swappable for loom's model-checked
//! versions (`RUSTFLAGS="--cfg loom"`), as tokio does in its own `loom` module.

#[cfg(not(loom))]
mod imp {
    pub(crate) use parking_lot::{Mutex, MutexGuard};
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64};
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64};

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
