//! Server-side leases: an admitted call's [`Permit`], held until the client completes
//! it or its TTL runs out.
//!
//! A lease id is 32 hex digits: a 64-bit sequence number and a 64-bit random tag, so
//! ids are unique and cannot be guessed. The map is sharded to keep lock contention
//! low under load: each thread opens its leases in a shard of its own, whose index
//! the sequence number carries. A reaper task expires leases every [`REAP_EVERY`]: a
//! lease from `admit` is completed as `timeout` (releasing its concurrency, as the
//! contract says); an unused part of a reservation is cancelled without an outcome,
//! since it never ran, which gives back everything it charged.
//!
//! A lease opens on a place taken beforehand ([`Leases::places`], see [`counts`]), so
//! that the caps on open leases are checked before admission.

use std::cell::Cell;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use toolgate::{Completion, Outcome, Permit};

use crate::settings::MAX_LEASE_TTL;

pub mod counts;

pub use counts::{Caps, Full, Held, Places};

/// How often expired leases are collected.
pub const REAP_EVERY: Duration = Duration::from_millis(20);

const SHARDS: usize = 16;

/// Every open lease.
#[derive(Debug)]
pub struct Leases {
    shards: [Padded; SHARDS],
    /// The next reservation's sequence number ([`Leases::new_id`]; a lease's comes
    /// from its shard).
    next: AtomicU64,
    counts: counts::Counts,
}

/// A shard on cache lines of its own: shards are written by different threads (each
/// worker opens its leases in its own), and two sharing a line would make every lease
/// opened move that line between the cores (the shard's lock was most of the time
/// `Leases::insert` took before).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(Mutex<Shard>);

/// Deadlines are indexed lazily: completing a lease only removes it from `map`, and
/// the reaper skips index entries whose lease is gone. Leases mostly arrive in deadline
/// order (one default TTL), so they go to the `fifo` (O(1)); one that would expire
/// before the newest in the fifo (a shorter `ttl_ms`) goes to `sorted`.
#[derive(Debug, Default)]
struct Shard {
    /// The rank of the shard's last lease: a lease's sequence number is its rank
    /// times [`SHARDS`] plus the shard's index, unique without a counter shared by
    /// every thread.
    last: u64,
    map: HashMap<u64, Entry, SeqHash>,
    fifo: VecDeque<(Instant, u64)>,
    sorted: BTreeSet<(Instant, u64)>,
}

/// Its deadline is kept once, in the shard's `fifo` or `sorted`: a sequence number is
/// never reused, so a lease found there and still in `map` is due. Kept small (the
/// permit is most of it): every lease opened writes one into a table that holds
/// every open lease.
#[derive(Debug)]
struct Entry {
    tag: u64,
    permit: Permit,
    tenant: Option<Arc<str>>,
    /// The tool's key in the tenant's counts (a lease with a tenant only).
    tool: Option<Arc<str>>,
    /// The reservation it belongs to, by its whole id: releasing it takes the
    /// random tag too, as completing a lease does. Boxed: only a reservation's
    /// leases have one.
    reservation: Option<Box<Id>>,
}

/// The map's hasher. Its keys are sequence numbers the gateway hands out itself (never
/// chosen by a client, so there is nothing to flood). The low bits of the hash, which
/// pick the bucket, are the key's rank within its shard, so that leases opened one
/// after the other sit in neighbouring buckets and expire in the same order: inserting
/// and expiring walk memory sequentially instead of missing the cache on every lease
/// (at 50 000 admissions per second and a 1 s TTL the map holds 50 000 leases). The top
/// bits, which the table uses to tell keys of one group apart, are a multiplicative
/// mix of the key.
type SeqHash = BuildHasherDefault<SeqHasher>;

#[derive(Debug, Default)]
struct SeqHasher(u64);

impl Hasher for SeqHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        const TOP: u64 = !0 << 57;
        let rank = self.0 / SHARDS as u64;
        (rank & !TOP) | (self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) & TOP)
    }
}

/// A lease or reservation id: sequence number and random tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Id {
    seq: u64,
    tag: u64,
}

/// What to open a lease with (its tenant is that of its places).
#[derive(Debug)]
pub struct NewLease<'a> {
    /// The permit it holds.
    pub permit: Permit,
    /// The tool it was admitted for.
    pub tool: &'a str,
    /// Its time to live (at most [`MAX_LEASE_TTL`]).
    pub ttl: Duration,
    /// The reservation it belongs to.
    pub reservation: Option<Id>,
}

// === impl Id ===

impl Id {
    /// Parses the 32-hex-digit form.
    pub fn parse(s: &str) -> Option<Self> {
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let seq = u64::from_str_radix(s.get(..16)?, 16).ok()?;
        let tag = u64::from_str_radix(s.get(16..)?, 16).ok()?;
        Some(Self { seq, tag })
    }

    /// The 32-hex-digit form, without going through `fmt` (it is on the admit path).
    pub fn to_hex(&self) -> [u8; 32] {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 32];
        for (i, d) in out.iter_mut().enumerate() {
            let (word, at) = if i < 16 {
                (self.seq, i)
            } else {
                (self.tag, i - 16)
            };
            *d = DIGITS[((word >> (60 - 4 * at)) & 0xf) as usize];
        }
        out
    }
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hex = self.to_hex();
        f.write_str(std::str::from_utf8(&hex).map_err(|_| std::fmt::Error)?)
    }
}

// === impl Leases ===

impl Default for Leases {
    fn default() -> Self {
        Self {
            shards: std::array::from_fn(|_| Padded::default()),
            next: AtomicU64::new(1),
            counts: counts::Counts::default(),
        }
    }
}

impl Leases {
    /// A fresh, unguessable id for a reservation (a lease takes its id from its shard).
    pub fn new_id(&self) -> Id {
        Id {
            seq: self.next.fetch_add(1, Ordering::Relaxed),
            tag: rand::random(),
        }
    }

    fn shard(&self, seq: u64) -> &Mutex<Shard> {
        &self.shards[(seq % SHARDS as u64) as usize].0
    }

    /// The shard this thread opens its leases in: one per thread, in turn, so that
    /// the server's workers open leases in shards of their own and the shard's lock
    /// and tables stay in their core's cache (a shard per sequence number sent
    /// consecutive leases, and so every worker, through every shard's lock).
    fn home() -> usize {
        thread_local! {
            static HOME: Cell<usize> = const { Cell::new(usize::MAX) };
        }
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        HOME.with(|home| {
            if home.get() == usize::MAX {
                home.set(NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS);
            }
            home.get()
        })
    }

    /// Takes `n` places for leases of `tenant`, to open them after admission.
    ///
    /// # Errors
    ///
    /// [`Full`] when they would pass a cap; nothing is taken then.
    pub fn places(&self, tenant: Option<&str>, n: usize, caps: Caps) -> Result<Places<'_>, Full> {
        self.counts.take(tenant, n, caps)
    }

    /// What `tenant` holds: its places and its open leases by tool.
    pub fn held_by(&self, tenant: &str) -> Held {
        self.counts.held_by(tenant)
    }

    /// Opens a lease on one of `places`.
    pub fn insert(&self, places: &mut Places<'_>, lease: NewLease<'_>) -> Id {
        let tag = rand::random();
        let expires = Instant::now() + lease.ttl.min(MAX_LEASE_TTL);
        let (tenant, tool) = places.open(lease.tool);
        let entry = Entry {
            tag,
            permit: lease.permit,
            tenant,
            tool,
            reservation: lease.reservation.map(Box::new),
        };
        let home = Self::home();
        let mut shard = self.shards[home].0.lock();
        shard.last += 1;
        let id = Id {
            seq: shard.last * SHARDS as u64 + home as u64,
            tag,
        };
        if shard.fifo.back().is_none_or(|&(last, _)| last <= expires) {
            shard.fifo.push_back((expires, id.seq));
        } else {
            shard.sorted.insert((expires, id.seq));
        }
        shard.map.insert(id.seq, entry);
        id
    }

    /// Takes the permit of a lease owned by `tenant` (any lease when auth is off,
    /// signalled by `tenant = None`): `None` when unknown, expired or not the
    /// tenant's.
    pub fn take(&self, id: &str, tenant: Option<&str>) -> Option<Permit> {
        let id = Id::parse(id)?;
        let mut shard = self.shard(id.seq).lock();
        let e = shard.map.get(&id.seq)?;
        if e.tag != id.tag || (tenant.is_some() && e.tenant.as_deref() != tenant) {
            return None;
        }
        let e = shard.map.remove(&id.seq)?;
        drop(shard);
        Some(self.closed(e))
    }

    /// Gives a removed lease's place back; returns its permit.
    fn closed(&self, e: Entry) -> Permit {
        self.counts.close(e.tenant.as_ref(), e.tool.as_ref());
        e.permit
    }

    /// Releases every open lease of a reservation; `None` when it has none left or
    /// is not the tenant's.
    pub fn release_reservation(&self, id: &str, tenant: Option<&str>) -> Option<usize> {
        let id = Id::parse(id)?;
        let mut released = Vec::new();
        for Padded(shard) in &self.shards {
            let mut s = shard.lock();
            let hits: Vec<u64> = s
                .map
                .iter()
                .filter(|(_, e)| {
                    e.reservation.as_deref() == Some(&id)
                        && (tenant.is_none() || e.tenant.as_deref() == tenant)
                })
                .map(|(k, _)| *k)
                .collect();
            released.extend(hits.iter().filter_map(|k| s.map.remove(k)));
        }
        let n = released.len();
        // Unused parts of a reservation give back everything they charged.
        for e in released {
            self.closed(e).cancel();
        }
        (n > 0).then_some(n)
    }

    /// Expires every lease whose deadline is at or before `now`; returns how many.
    pub fn expire(&self, now: Instant) -> usize {
        let mut expired = Vec::new();
        for Padded(shard) in &self.shards {
            let s = &mut *shard.lock();
            // A lease completed before its deadline is no longer in `map`.
            while let Some(&(_, seq)) = s.fifo.front().filter(|(at, _)| *at <= now) {
                s.fifo.pop_front();
                expired.extend(s.map.remove(&seq));
            }
            while let Some(&(_, seq)) = s.sorted.first().filter(|(at, _)| *at <= now) {
                s.sorted.pop_first();
                expired.extend(s.map.remove(&seq));
            }
        }
        let n = expired.len();
        for e in expired {
            let reserved = e.reservation.is_some();
            let permit = self.closed(e);
            if reserved {
                permit.cancel();
            } else {
                permit.complete(Completion::new(Outcome::Timeout));
            }
        }
        n
    }

    /// Releases every lease (at shutdown).
    pub fn drain(&self) -> usize {
        let mut n = 0;
        for Padded(shard) in &self.shards {
            // The shard keeps its last rank: a lease opened later never reuses an id.
            let taken = {
                let mut s = shard.lock();
                let last = s.last;
                std::mem::replace(
                    &mut *s,
                    Shard {
                        last,
                        ..Shard::default()
                    },
                )
            };
            n += taken.map.len();
            for e in taken.map.into_values() {
                drop(self.closed(e));
            }
        }
        n
    }

    /// Open leases.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().map.len()).sum()
    }

    /// Whether no lease is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Expires leases every [`REAP_EVERY`] until `leases` is dropped.
pub fn spawn_reaper(leases: Weak<Leases>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(REAP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            let Some(leases) = leases.upgrade() else {
                return;
            };
            let n = leases.expire(Instant::now());
            if n > 0 {
                tracing::debug!(expired = n, "leases expired");
            }
        }
    });
}

#[cfg(test)]
mod tests;
