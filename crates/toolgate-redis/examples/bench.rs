//! Admission throughput against a real Redis: `callers` concurrent tasks calling
//! `admit_now` on an engine on the Redis store (the crate's one front door: what the
//! gateway and the Python package run) in a loop for `secs` seconds on a quota that
//! always admits. `--engines N` spreads the callers over N engines, each with its own
//! connection (64 engines of one caller each: 64 connections, one call in flight on
//! each, as `redis-benchmark -c 64`); by default one engine, one connection that all
//! callers share (their calls pipelined or coalesced).
//! Used by `scripts/bench-redis`; prints one JSON line (`warmup`: the admissions made
//! before the timed loop) and writes latencies (µs, one per line) to
//! `--latencies FILE` if given.
//!
//! ```text
//! cargo run --release -p toolgate-redis --example bench -- \
//!     --url redis://127.0.0.1:6390 --callers 64 --secs 5
//! ```

#![allow(
    clippy::disallowed_methods,
    reason = "a benchmark measures real elapsed time"
)]

use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use toolgate::config::Config;
use toolgate::{Call, Policy};

struct Args {
    url: String,
    callers: usize,
    secs: u64,
    prefix: String,
    start_ms: u64,
    latencies: Option<String>,
    grant: u64,
    /// Runtime worker threads (default 2; the 4-process setup uses 1 each, so that
    /// 4 clients and Redis are not 9 threads on a 2-core machine).
    threads: usize,
    /// Engines (connections) the callers are spread over.
    engines: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        url: "redis://127.0.0.1:6379".into(),
        callers: 64,
        secs: 5,
        prefix: "toolgate-bench:".into(),
        start_ms: 0,
        latencies: None,
        grant: 0,
        threads: 2,
        engines: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag}: missing value"));
        let num = |v: String| v.parse::<u64>().map_err(|e| format!("{v}: {e}"));
        match flag.as_str() {
            "--url" => a.url = value()?,
            "--callers" => {
                a.callers = usize::try_from(num(value()?)?).map_err(|e| e.to_string())?
            }
            "--secs" => a.secs = num(value()?)?,
            "--prefix" => a.prefix = value()?,
            "--start-ms" => a.start_ms = num(value()?)?,
            "--latencies" => a.latencies = Some(value()?),
            "--grant" => a.grant = num(value()?)?,
            "--threads" => {
                a.threads = usize::try_from(num(value()?)?).map_err(|e| e.to_string())?;
            }
            "--engines" => {
                a.engines = usize::try_from(num(value()?)?).map_err(|e| e.to_string())?;
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(a)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.threads.max(1))
        .enable_all()
        .build()?;
    rt.block_on(run(a))
}

async fn run(a: Args) -> Result<(), Box<dyn std::error::Error>> {
    let toml = format!(
        "[store]\nurl = {:?}\nkey_prefix = {:?}\ntimeout = \"1s\"\nlocal_grant = {}\n\
         [tools.bench]\nrate = \"1000000000/s\"\nburst = 1000000000\n",
        a.url, a.prefix, a.grant
    );
    let config = Config::from_toml_str(&toml)?;
    let store = config.store.clone().ok_or("no store")?;
    let mut engines = Vec::new();
    for _ in 0..a.engines.max(1) {
        let policy = Policy::new(config.clone())?;
        engines.push(toolgate_redis::engine(policy, &store).await?);
    }
    // Warm up: connect and load the script.
    let mut warmup = 0;
    for engine in &engines {
        for _ in 0..10 {
            let _ = admit(engine).await;
            warmup += 1;
        }
    }
    if a.start_ms > 0 {
        tokio::time::sleep(Duration::from_millis(a.start_ms.saturating_sub(unix_ms()))).await;
    }
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs(a.secs);
    let tasks: Vec<_> = (0..a.callers)
        .map(|i| tokio::spawn(call_until(engines[i % engines.len()].clone(), end)))
        .collect();
    let (mut ok, mut no, mut lat) = (0, 0, Vec::new());
    for t in tasks {
        let (o, n, l) = t.await?;
        ok += o;
        no += n;
        lat.extend(l);
    }
    let secs = t0.elapsed().as_secs_f64();
    lat.sort_unstable();
    let pct = |p: usize| {
        lat.get(lat.len().saturating_sub(1) * p / 100)
            .copied()
            .unwrap_or(0)
    };
    if let Some(path) = &a.latencies {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        for l in &lat {
            writeln!(f, "{l}")?;
        }
    }
    println!(
        "{{\"admitted\": {ok}, \"rejected\": {no}, \"warmup\": {warmup}, \"secs\": {secs:.3}, \"p50_us\": {}, \"p99_us\": {}}}",
        pct(50),
        pct(99)
    );
    Ok(())
}

/// One caller: admits one call after the other until `end`; the calls admitted, those
/// rejected, and each call's latency in µs.
async fn call_until(engine: toolgate::Engine, end: Instant) -> (u64, u64, Vec<u32>) {
    let (mut ok, mut no, mut lat) = (0u64, 0u64, Vec::with_capacity(100_000));
    while Instant::now() < end {
        let s = Instant::now();
        if admit(&engine).await {
            ok += 1;
        } else {
            no += 1;
        }
        lat.push(u32::try_from(s.elapsed().as_micros()).unwrap_or(u32::MAX));
    }
    (ok, no, lat)
}

/// One admission (the permit is dropped at once); whether it was admitted.
async fn admit(engine: &toolgate::Engine) -> bool {
    engine.admit_now(&Call::new("bench")).await.is_ok()
}
