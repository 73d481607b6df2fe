//! The permit's ends: once, whatever it keeps.

use super::*;
use crate::{Call, Engine, Policy};

/// A tool on the fast path (a permit that keeps nothing) and one with a
/// concurrency limit (a permit that keeps a part).
fn engine() -> Engine {
    Engine::new(
        Policy::from_toml_str(
            "[tools.fast]\nrate = \"1000/s\"\nburst = 1000\n\
             [tools.parts]\nconcurrency = 2",
        )
        .unwrap(),
    )
}

fn in_flight(e: &Engine, tool: &str) -> u64 {
    e.tool_state(tool, None).unwrap().in_flight
}

#[test]
fn a_permit_ends_its_call_once_whether_it_keeps_parts_or_nothing() {
    let e = engine();
    for tool in ["fast", "parts"] {
        let call = Call::new(tool);
        // Completed, then dropped (by `complete` itself): counted out once.
        let (a, b) = (e.try_admit(&call).unwrap(), e.try_admit(&call).unwrap());
        assert_eq!(in_flight(&e, tool), 2, "{tool}");
        a.complete(Completion::success());
        assert_eq!(in_flight(&e, tool), 1, "{tool}");
        // Cancelled, and dropped.
        b.cancel();
        assert_eq!(in_flight(&e, tool), 0, "{tool}");
        let c = e.try_admit(&call).unwrap();
        drop(c);
        assert_eq!(in_flight(&e, tool), 0, "{tool}");
        // The parts came back every time: both slots are free again.
        let both = [e.try_admit(&call), e.try_admit(&call)];
        assert!(both.iter().all(Result::is_ok), "{tool}: {both:?}");
        drop(both);
        assert_eq!(in_flight(&e, tool), 0, "{tool}");
    }
}

#[test]
fn a_permit_that_keeps_nothing_reads_like_one_that_keeps_parts() {
    let e = engine();
    for tool in ["fast", "parts"] {
        let p = e.try_admit(&Call::new(tool)).unwrap();
        assert_eq!(p.tool(), Some(tool));
        assert_eq!(p.waited(), Duration::ZERO);
        assert_eq!(p.store_source(), None);
        assert!(!p.is_probe());
        assert_eq!(p.kept.is_empty(), tool == "fast", "{tool}");
    }
    // A tool without a policy: admitted without accounting, nothing kept.
    let p = e.try_admit(&Call::new("unlisted")).unwrap();
    assert_eq!((p.tool(), p.kept.is_empty()), (None, true));
}

#[test]
fn a_permit_stays_small_enough_to_move_on_every_admission() {
    // The tenant's key is kept inline, and what only calls that waited or went to
    // a shared store keep is behind one pointer: 112 bytes, as before per-tenant
    // signals.
    assert_eq!(std::mem::size_of::<Permit>(), 112);
}
