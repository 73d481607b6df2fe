//! The recorder behind `GET /metrics` keeps a bounded amount of memory when nobody
//! scrapes it: a histogram keeps every value recorded until the recorder's upkeep
//! (or a scrape) folds them into its summary, and the gateway runs that upkeep
//! itself. Its own test binary: it counts the heap with dhat's allocator.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use toolgate_gateway::metrics::{install, UPKEEP_EVERY};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn live_bytes() -> usize {
    dhat::HeapStats::get().curr_bytes
}

#[tokio::test(start_paused = true)]
async fn histogram_values_are_folded_in_without_a_scrape() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let _handle = install();
    // What the Redis store records per admission.
    let latency = metrics::histogram!("toolgate_store_latency_seconds", "op" => "admit");
    latency.record(0.0004);
    tokio::time::sleep(UPKEEP_EVERY + Duration::from_millis(1)).await;
    let before = live_bytes();
    let values = 200_000;
    for i in 0..values {
        latency.record(f64::from(i % 1000) * 1e-6);
    }
    let grown = live_bytes().saturating_sub(before);
    assert!(
        grown >= values as usize * 8,
        "each value kept until folded in: {grown} bytes for {values}"
    );
    // No scrape: the upkeep folds them in within one period. The recorder frees
    // what it folded in once later records have moved its epoch on (as the next
    // admissions do).
    tokio::time::sleep(UPKEEP_EVERY + Duration::from_millis(1)).await;
    for _ in 0..2_000 {
        latency.record(0.0004);
    }
    let left = live_bytes().saturating_sub(before);
    assert!(
        left < grown / 4,
        "{left} bytes of {grown} still held after the upkeep"
    );
}
