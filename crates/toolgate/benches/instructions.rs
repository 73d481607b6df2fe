//! Instructions per decision, independent of the machine's load: runs one form of
//! admission `N` times, for `valgrind --tool=callgrind` to count. Run each form at
//! two call counts and divide the difference by the difference in calls, which
//! takes set-up and tear-down out:
//!
//! ```sh
//! cargo bench -p toolgate --bench instructions --no-run
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/deps/instructions-* scoped 100000
//! ```
//!
//! Forms: `governor` (one `check()`), `scoped` (`ToolHandle::try_admit_scoped`),
//! `owned` (`ToolHandle::try_admit`), `by_name` (`Engine::try_admit`),
//! `by_name_long` (the same, of a tool named in 27 bytes, as MCP tools often are),
//! `by_name_async` and `rejected_async` (`Engine::admit` polled once, as the
//! gateway's first poll: admitted, and refused by a spent bucket), `tenant`
//! (`Engine::try_admit` on a per-tenant bucket, 64 tenants in turn), `four`
//! (`Engine::try_admit` of a call under four quotas, completed with its token count,
//! as in the `quotas_per_call` criterion group), `concurrency` (`Engine::try_admit` of
//! a tool under one concurrency limit, dropped: the general path with a part to
//! release), `rejected` (`Engine::try_admit`
//! refused by a spent bucket) and `governor_rejected` (governor's `check()` on a
//! spent limiter, with the time to wait), `pipeline_run` / `pipeline_bare` (`Engine::run` of a
//! ready attempt, and admission plus completion by hand, on a resilient tool),
//! `governor_keyed` (governor's keyed limiter, the same tenants), `governor_by_key`
//! (governor's keyed limiter asked by the tool's name, one key: its own form of a
//! call by name), and
//! `tenant_100k` / `governor_keyed_100k` (100,000 partitions made first, then keys
//! 7,919 apart, as in the `partitions_100k` criterion group: with
//! `--cache-sim=yes`, the data cache misses per decision), and `tenant_handle_100k` /
//! `tenant_scoped_100k` (the same through a `ToolHandle`, as governor's keyed limiter
//! is called: `try_admit` and `try_admit_scoped`). Without arguments (as under
//! `cargo test --benches`) each form runs a few calls.

#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;

use governor::clock::Clock;

use std::time::Duration;

use toolgate::{AttemptResult, Call, Completion, RunOptions};

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use support::{
    engine, governor_direct, governor_keyed, governor_spent, poll_once, tenant_keys, FOUR_QUOTAS,
    OPEN_BUCKET, PIPELINE_TOOL, SPENT_BUCKET,
};

fn run(form: &str, n: u64) {
    let e = engine(OPEN_BUCKET);
    let handle = e.tool("t");
    let call = Call::new("t");
    let gov = governor_direct();
    match form {
        "governor" => (0..n).for_each(|_| black_box(gov.check()).unwrap()),
        "scoped" => (0..n).for_each(|_| drop(handle.try_admit_scoped(black_box(&call)).unwrap())),
        "owned" => (0..n).for_each(|_| drop(handle.try_admit(black_box(&call)).unwrap())),
        "by_name" => (0..n).for_each(|_| drop(e.try_admit(black_box(&call)).unwrap())),
        "by_name_long" => {
            let name = "github__create_pull_request";
            let e = engine(&OPEN_BUCKET.replace("[tools.t]", &format!("[tools.{name}]")));
            let call = Call::new(name);
            (0..n).for_each(|_| drop(e.try_admit(black_box(&call)).unwrap()));
        }
        "by_name_async" => {
            (0..n).for_each(|_| drop(poll_once(e.admit(black_box(&call))).unwrap()));
        }
        "governor_by_key" => {
            // governor's form of a call by name: its keyed limiter, one key.
            let gov = governor_keyed();
            let name = String::from("t");
            (0..n).for_each(|_| black_box(gov.check_key(black_box(&name))).unwrap());
        }
        "governor_keyed" => {
            let gov = governor_keyed();
            let keys = tenant_keys(64);
            (0..n).for_each(|i| black_box(gov.check_key(&keys[i as usize % keys.len()])).unwrap());
        }
        "tenant_100k" | "tenant_handle_100k" | "tenant_scoped_100k" | "governor_keyed_100k" => {
            // The `partitions_100k` criterion group's pattern: 100,000 partitions
            // made first, then keys taken 7,919 apart (for cache-miss counts).
            let keys = tenant_keys(100_000);
            let e = engine(&format!(
                "{OPEN_BUCKET}\npartition = \"tenant\"\nmax_partitions = 200000"
            ));
            let gov = governor_keyed();
            let handle = e.tool("t");
            for k in &keys {
                if form == "governor_keyed_100k" {
                    gov.check_key(k).unwrap();
                } else {
                    drop(e.try_admit(&Call::new("t").tenant(k)).unwrap());
                }
            }
            let mut i = 0;
            (0..n).for_each(|_| {
                i = (i + 7919) % keys.len();
                let call = || Call::new("t").tenant(&keys[i]);
                match form {
                    "tenant_100k" => drop(e.try_admit(black_box(&call())).unwrap()),
                    "tenant_handle_100k" => drop(handle.try_admit(black_box(&call())).unwrap()),
                    "tenant_scoped_100k" => {
                        drop(handle.try_admit_scoped(black_box(&call())).unwrap());
                    }
                    _ => black_box(gov.check_key(&keys[i])).unwrap(),
                }
            });
        }
        "tenant" => {
            let e = engine(&format!("{OPEN_BUCKET}\npartition = \"tenant\""));
            let keys = tenant_keys(64);
            (0..n).for_each(|i| {
                let call = Call::new("t").tenant(&keys[i as usize % keys.len()]);
                drop(e.try_admit(black_box(&call)).unwrap());
            });
        }
        "governor_rejected" => {
            let (gov, clock) = governor_spent();
            (0..n).for_each(|_| {
                black_box(
                    black_box(gov.check())
                        .unwrap_err()
                        .wait_time_from(clock.now()),
                );
            });
        }
        "rejected" => {
            let e = engine(SPENT_BUCKET);
            drop(e.try_admit(&call).unwrap());
            (0..n).for_each(|_| drop(black_box(e.try_admit(black_box(&call))).unwrap_err()));
        }
        "rejected_async" => {
            let e = engine(SPENT_BUCKET);
            drop(e.try_admit(&call).unwrap());
            (0..n).for_each(|_| drop(black_box(poll_once(e.admit(black_box(&call)))).unwrap_err()));
        }
        "pipeline_bare" | "pipeline_run" => {
            let e = engine(PIPELINE_TOOL);
            let run = form == "pipeline_run";
            (0..n).for_each(|_| {
                if run {
                    let out = poll_once(e.run(black_box(&call), RunOptions::new(), |ctx| {
                        std::future::ready(AttemptResult::<u32, ()>::success(ctx.number()))
                    }));
                    black_box(out.unwrap());
                } else {
                    let permit = e.try_admit(black_box(&call)).unwrap();
                    permit.complete(Completion::success().latency(Duration::ZERO));
                }
            });
        }
        "concurrency" => {
            let e = engine("[tools.t]\nconcurrency = 1000");
            (0..n).for_each(|_| drop(e.try_admit(black_box(&call)).unwrap()));
        }
        "four" => {
            let e = engine(FOUR_QUOTAS);
            let call = Call::new("t").tokens(10);
            (0..n).for_each(|_| {
                let permit = e.try_admit(black_box(&call)).unwrap();
                permit.complete(Completion::success().tokens(10));
            });
        }
        other => panic!("unknown form {other:?}: see the module documentation"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.as_slice() {
        [form, n] => run(form, n.parse().expect("a call count")),
        _ => [
            "governor",
            "scoped",
            "owned",
            "by_name",
            "tenant",
            "four",
            "concurrency",
            "rejected",
            "governor_rejected",
            "governor_keyed",
            "governor_by_key",
        ]
        .into_iter()
        .for_each(|f| run(f, 10)),
    }
}
