//! The tools this thread looked up by name lately ([`get`], [`put`]): a call by name
//! finds its tool here without reading the policy in force.
//!
//! Reading the policy in force is reload-safe but not free: `arc-swap`'s guard costs
//! two locked instructions and about 65 others, and the tool's runtime is then cloned
//! for the permit (a third locked instruction). A thread that calls the same tools
//! again (a gateway's worker, an agent's loop) keeps here, per tool, the stamp of
//! the policy it was looked up in (`Live::stamp`, which also tells engines apart)
//! and a *weak* reference to its runtime: a hit is the name's key and compare, one
//! load of the stamp and one `Weak::upgrade` (the permit's own reference, one locked
//! instruction). The entry keeps the name's key ([`crate::words::Key`]), which holds
//! a short name whole: the name is compared against it, not read off the runtime.
//!
//! Why it is correct: an entry is used only while its engine's stamp is the one it
//! was looked up at, so it names the tool of the policy in force, as a read of the
//! policy at that instant would (a reload that lands after the check marks the tool
//! superseded, which every path of the admission already handles). The reference is
//! weak, so the cache never keeps a retired policy's tools, a dropped engine or its
//! store alive: an entry whose runtime is gone simply misses. A stamp is never
//! given to two policies, of one engine or of two, so engines are told apart by it,
//! not by address.
//!
//! Written by hand because it is a thread-local, direct-mapped table of `Weak`s
//! checked against a stamp; no crate does that for less than the lookup it saves.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use crate::tool::ToolRuntime;
use crate::words::Key;

/// Entries per thread, `2^BITS`: direct-mapped by the name's key ([`Key::spot`]).
const BITS: u32 = 4;
const WAYS: usize = 1 << BITS;

/// One tool as a thread last looked it up.
struct Entry {
    /// The stamp of the policy the tool was looked up in (`Live::stamp`).
    stamp: u64,
    /// The key of the tool's name.
    key: Key,
    tool: Weak<ToolRuntime>,
}

thread_local! {
    static RECENT: RefCell<[Option<Entry>; WAYS]> =
        const { RefCell::new([const { None }; WAYS]) };
}

/// The entry a name of key `key` maps to.
#[inline(always)]
fn slot(key: &Key) -> usize {
    key.spot(BITS)
}

/// The runtime of the tool `name` (whose key is `key`) in the policy of stamp
/// `stamp`, if this thread looked it up in that policy and the runtime is still
/// alive.
#[inline(always)]
pub(crate) fn get(stamp: u64, key: &Key, name: &str) -> Option<Arc<ToolRuntime>> {
    let tool = RECENT
        .try_with(|r| {
            let r = r.try_borrow().ok()?;
            let e = r[slot(key)].as_ref()?;
            if e.key == *key && e.stamp == stamp {
                e.tool.upgrade()
            } else {
                None
            }
        })
        .ok()
        .flatten()?;
    // A short name's key is the name; a longer one is compared, read off the
    // runtime now held.
    (key.is_whole() || crate::words::same(tool.name.as_bytes(), name.as_bytes())).then_some(tool)
}

/// Remembers `tool`, looked up by its name (whose key is `key`) in the policy of
/// stamp `stamp`, in place of the entry it maps to.
pub(crate) fn put(stamp: u64, key: Key, tool: &Arc<ToolRuntime>) {
    let at = slot(&key);
    let entry = Entry {
        stamp,
        key,
        tool: Arc::downgrade(tool),
    };
    // During the thread's teardown, or re-entered (never, today): not remembered.
    // The entry replaced is dropped once the borrow has ended.
    let _replaced = RECENT.try_with(|r| {
        r.try_borrow_mut()
            .ok()
            .and_then(|mut r| r[at].replace(entry))
    });
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use crate::{Call, Engine, Policy};

    fn engine(toml: &str) -> Engine {
        Engine::new(Policy::from_toml_str(toml).expect("a valid policy"))
    }

    fn admitted(e: &Engine, tool: &str) -> bool {
        e.try_admit(&Call::new(tool)).is_ok()
    }

    #[test]
    fn a_reload_is_seen_by_the_next_call_of_a_thread_that_looked_the_tool_up() {
        let e = engine("[tools.t]\nrate = \"1/h\"");
        assert!(admitted(&e, "t"));
        assert!(!admitted(&e, "t"), "remembered, and its bucket is spent");
        e.apply(Policy::from_toml_str("[tools.t]\nconcurrency = 5").unwrap());
        // The new policy's tool, not the remembered one (whose bucket stays spent).
        assert!(admitted(&e, "t"));
        // A tool the reload removed is unknown at once (allowed by default).
        e.apply(
            Policy::from_toml_str("unknown_tools = \"deny\"\n[tools.u]\nrate = \"1/h\"").unwrap(),
        );
        assert!(!admitted(&e, "t"));
        assert!(admitted(&e, "u"));
    }

    #[test]
    fn engines_on_one_thread_keep_their_own_tools() {
        // Two engines, the same tool name (the same hash, so the same entry):
        // alternating calls never take the other engine's bucket.
        let a = engine("[tools.t]\nrate = \"1/h\"\nburst = 2");
        let b = engine("[tools.t]\nrate = \"1/h\"\nburst = 3");
        let mut got = (0, 0);
        for _ in 0..5 {
            got.0 += u32::from(admitted(&a, "t"));
            got.1 += u32::from(admitted(&b, "t"));
        }
        assert_eq!(got, (2, 3));
        // A new engine in place of a dropped one, perhaps at its address, starts
        // with its own full bucket.
        drop(a);
        let c = engine("[tools.t]\nrate = \"1/h\"\nburst = 2");
        assert!(admitted(&c, "t") && admitted(&c, "t") && !admitted(&c, "t"));
    }

    #[test]
    fn nothing_is_kept_alive_by_a_thread_that_looked_it_up() {
        let e = engine("[tools.t]\nrate = \"1/h\"\n[tools.u]\nrate = \"1/h\"");
        let runtime = Arc::downgrade(e.live().compiled().tools.get("t").unwrap());
        assert!(admitted(&e, "t"));
        // A reload retires the runtime: no thread's entry keeps it.
        e.apply(Policy::from_toml_str("[tools.t]\nrate = \"2/h\"").unwrap());
        assert!(runtime.upgrade().is_none(), "the retired runtime was freed");
        let runtime = Arc::downgrade(e.live().compiled().tools.get("t").unwrap());
        // Looked up (and remembered) whatever the answer.
        drop(e.try_admit(&Call::new("t")));
        drop(e);
        assert!(
            runtime.upgrade().is_none(),
            "a dropped engine's runtime was freed"
        );
    }

    #[test]
    fn a_reload_other_threads_see_is_seen_by_their_next_call() {
        // Four threads call "t" by name in a loop (each filling its own table);
        // the main thread removes "t" (unknown tools denied) and then raises a
        // flag. A thread that has seen the flag has seen the reload: its next
        // call must be refused as unknown, never admitted by a remembered tool.
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Barrier;

        use crate::Reason;

        let e = Arc::new(engine("[tools.t]\nrate = \"1000000000/s\""));
        let reloaded = Arc::new(AtomicBool::new(false));
        let started = Arc::new(Barrier::new(5));
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let (e, reloaded, started) = (e.clone(), reloaded.clone(), started.clone());
                std::thread::spawn(move || {
                    let mut admitted_before = 0u32;
                    for i in 0.. {
                        let seen = reloaded.load(Ordering::Acquire);
                        match e.try_admit(&Call::new("t")) {
                            Ok(_) => {
                                assert!(!seen, "admitted after the reload was seen");
                                admitted_before += 1;
                            }
                            Err(r) if seen => {
                                assert_eq!(r.reason(), Reason::UnknownTool);
                                return admitted_before;
                            }
                            Err(r) => assert_eq!(r.reason(), Reason::UnknownTool),
                        }
                        if i == 100 {
                            started.wait();
                        }
                    }
                    unreachable!()
                })
            })
            .collect();
        started.wait();
        // The old runtime stays alive (a handle holds it), so a remembered entry
        // would still upgrade: only the stamp tells it is stale.
        let old = e.tool("t");
        e.apply(
            Policy::from_toml_str("unknown_tools = \"deny\"\n[tools.u]\nrate = \"1/s\"").unwrap(),
        );
        reloaded.store(true, Ordering::Release);
        for w in workers {
            assert!(
                w.join().unwrap() > 100,
                "each thread admitted by its table first"
            );
        }
        drop(old);
    }

    proptest! {
        /// Calls by name over many tools (more than the entries, so names share
        /// entries and evict each other) and two engines: each (engine, tool) is
        /// admitted exactly its own burst, as if nothing were remembered. Half the
        /// names are longer than a key holds whole, with the same length and the
        /// same first and last 8 bytes, so the same key: those are told apart by
        /// their bytes.
        #[test]
        fn every_call_finds_its_own_tool(
            calls in prop::collection::vec((0usize..2, 0usize..40), 0..400),
        ) {
            let name = |i: usize| {
                if i.is_multiple_of(2) { format!("tool-{i}") } else { format!("a-tool-of-{i:02}-a-longer-name") }
            };
            let toml = |k: usize| {
                (0..40)
                    .map(|i| format!("[tools.\"{}\"]\nrate = \"1/h\"\nburst = {}\n", name(i), 1 + (i + k) % 4))
                    .collect::<String>()
            };
            let engines = [engine(&toml(0)), engine(&toml(1))];
            let mut count = [[0u32; 40]; 2];
            for (e, t) in calls {
                let name = name(t);
                let burst = 1 + (t + e) as u32 % 4;
                let ok = admitted(&engines[e], &name);
                prop_assert_eq!(ok, count[e][t] < burst, "engine {} tool {}", e, t);
                count[e][t] += u32::from(ok);
            }
        }
    }
}
