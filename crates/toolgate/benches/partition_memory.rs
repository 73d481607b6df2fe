//! Heap bytes per tenant partition, toolgate against governor's keyed limiter
//! (DashMap store), counted by the allocator rather than read off the resident set:
//! dhat's heap statistics give the bytes allocated and not yet freed, so the figure
//! is the same from run to run and machine to machine (RSS moves by pages, with the
//! allocator's own caching and with whatever else the process did).
//!
//! ```sh
//! cargo bench -p toolgate --bench partition_memory
//! ```
//!
//! Each side creates its limiter, then one partition per tenant (100,000 tenants,
//! `tenant-000000` on, then as many 36-byte UUID-shaped ids); the bytes still
//! allocated after, less those before, divided by the tenants: the map's slots, the
//! stored copy of each key and each partition's state. The keys the benchmark itself holds are made beforehand and not counted.
//! Without `--bench` (as under `cargo test --benches`) it runs 1,000 tenants.

#![allow(clippy::unwrap_used, missing_docs)]

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use toolgate::Call;

use support::{engine, governor_keyed, tenant_keys};

fn live_bytes() -> usize {
    dhat::HeapStats::get().curr_bytes
}

fn main() {
    let tenants = if std::env::args().any(|a| a == "--bench") {
        100_000
    } else {
        1_000
    };
    // Testing mode: statistics only, no profile written out.
    let _profiler = dhat::Profiler::builder()
        .testing()
        .trim_backtraces(Some(1))
        .build();
    let short = tenant_keys(tenants);
    // UUID-shaped ids: too long for a slot, so each key has an allocation of its own.
    let long: Vec<String> = short
        .iter()
        .map(|k| format!("9f1c6a0e-52b4-4d9e-8f3a-{}", k.replace("tenant-", "0d6c1e")))
        .collect();
    for (what, keys) in [("13-byte keys", &short), ("36-byte keys", &long)] {
        let (toolgate, governor) = per_partition(keys);
        println!(
            "heap bytes per partition ({tenants} tenants, {what}, allocator statistics): toolgate {toolgate:.1} B, governor {governor:.1} B ({:.2}x)",
            toolgate / governor
        );
    }
}

/// Heap bytes per partition on each side, one partition per key of `keys`.
fn per_partition(keys: &[String]) -> (f64, f64) {
    let e = engine(&format!(
        "[tools.t]\nrate = \"4000000000/s\"\nburst = 4000000000\npartition = \"tenant\"\nmax_partitions = {}",
        keys.len() * 2
    ));
    let before = live_bytes();
    for k in keys {
        drop(e.try_admit(&Call::new("t").tenant(k)).unwrap());
    }
    let toolgate = live_bytes().saturating_sub(before) as f64 / keys.len() as f64;

    let gov = governor_keyed();
    let before = live_bytes();
    for k in keys {
        gov.check_key(k).unwrap();
    }
    let governor = live_bytes().saturating_sub(before) as f64 / keys.len() as f64;

    assert!(
        toolgate > 0.0 && governor > 0.0,
        "every partition costs memory"
    );
    (toolgate, governor)
}
