//! toolgate side by side with governor, on equivalent quotas and fake clocks (no
//! clock noise). Run: `cargo bench -p toolgate --bench toolgate_benches`.

#![allow(clippy::unwrap_used, missing_docs)]
#![allow(
    clippy::disallowed_methods,
    reason = "a benchmark measures real elapsed time"
)]

mod contended;
mod partitions;
mod quotas;
mod single_threaded;
// Shared with the benches of other binaries, which use other parts of it.
#[allow(dead_code)]
mod support;

criterion::criterion_group!(
    benches,
    single_threaded::bench,
    contended::bench,
    quotas::bench,
    partitions::bench
);
criterion::criterion_main!(benches);
