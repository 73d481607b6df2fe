//! An upstream's pause is bounded by the tool's `max_pause`, whichever front door its
//! signal comes through, and on a tool whose quotas are per tenant it pauses (or
//! spreads) that tenant's calls only (issue #13, item 1).

use std::task::Poll;
use std::time::{Duration, SystemTime};

use tokio_test::{assert_pending, assert_ready, task};
use toolgate::{AttemptResult, Call, Completion, Outcome, RunOptions};

use crate::support::{assert_rejected, engine, ms};

const YEAR_9999: &str = "Fri, 31 Dec 9999 23:59:59 GMT";

/// What an upstream's `Retry-After: Fri, 31 Dec 9999 …` asks for.
#[allow(
    clippy::disallowed_methods,
    reason = "an HTTP date is read against the wall clock"
)]
fn centuries() -> Duration {
    toolgate::retry::retry_after(YEAR_9999, SystemTime::now()).unwrap()
}

#[allow(
    clippy::disallowed_methods,
    reason = "a reset time is read against the wall clock"
)]
fn headers(h: &[(&str, &str)]) -> Completion {
    let s = toolgate::shaping::server_limit(h.iter().copied(), SystemTime::now()).unwrap();
    Completion::success().server_limit(s)
}

/// Asserts that `call` is paused for exactly `d` from now (the clock is moved).
#[track_caller]
fn paused_for(
    engine: &toolgate::Engine,
    clock: &toolgate::ManualClock,
    call: &Call<'_>,
    d: Duration,
) {
    assert_rejected(
        engine.try_admit(call),
        "rate_limited",
        "tools.t.retry_after",
        Some(d),
    );
    clock.advance(d - Duration::from_nanos(1));
    assert!(engine.try_admit(call).is_err(), "paused until its very end");
    clock.advance(Duration::from_nanos(1));
    assert!(
        engine.try_admit(call).is_ok(),
        "and not a nanosecond longer"
    );
}

#[test]
fn a_retry_after_of_the_year_9999_pauses_for_exactly_max_pause() {
    let call = Call::new("t");
    for (extra, max) in [
        ("", Duration::from_secs(300)),
        ("max_pause = \"90s\"", Duration::from_secs(90)),
        ("max_pause = \"24h\"", Duration::from_secs(24 * 3600)),
    ] {
        let (engine, clock) = engine(&format!("[tools.t]\nrate = \"100/s\"\n{extra}"));
        engine
            .try_admit(&call)
            .unwrap()
            .complete(Completion::new(Outcome::Error).retry_after(centuries()));
        paused_for(&engine, &clock, &call, max);
    }
    // `[defaults]` sets it for every tool.
    let (engine, clock) = engine("[defaults]\nmax_pause = \"1m\"\n[tools.t]\nrate = \"100/s\"");
    engine
        .try_admit(&call)
        .unwrap()
        .complete(Completion::new(Outcome::Error).retry_after(centuries()));
    paused_for(&engine, &clock, &call, Duration::from_secs(60));
}

#[test]
fn a_rate_limit_reset_of_u64_max_pauses_or_spreads_for_at_most_max_pause() {
    let call = Call::new("t");
    let (engine, clock) = engine("[tools.t]\nrate = \"100/s\"");
    engine.try_admit(&call).unwrap().complete(headers(&[(
        "RateLimit",
        "\"d\";r=0;t=18446744073709551615",
    )]));
    paused_for(&engine, &clock, &call, Duration::from_secs(300));

    // One call left for ~584 years: spread over max_pause instead.
    engine.try_admit(&call).unwrap().complete(headers(&[
        ("RateLimit", "\"d\";r=1;t=18446744073709551615"),
        ("RateLimit-Policy", "\"d\";q=100;w=60"),
    ]));
    assert!(engine.try_admit(&call).is_ok(), "the one slot");
    assert_rejected(
        engine.try_admit(&call),
        "rate_limited",
        "tools.t.server_limit",
        Some(Duration::from_secs(300)),
    );
    // The window ends with max_pause: the tool runs at its own rate again.
    clock.advance(Duration::from_secs(300));
    let burst = (0..10).filter(|_| engine.try_admit(&call).is_ok()).count();
    assert_eq!(burst, 10);
}

#[test]
fn through_engine_run_the_pause_is_bounded_too() {
    // max_retry_after (60 s by default) is shorter than the bounded pause: the call
    // ends at once, as `retry_after_too_long`.
    let (engine, _clock) = engine(
        "[tools.t]\nrate = \"100/s\"\nidempotent = true\nmax_pause = \"2m\"\n[tools.t.retry]",
    );
    let call = Call::new("t");
    let out = match task::spawn(engine.run(&call, RunOptions::new(), |_| async {
        AttemptResult::<(), _>::failure("busy")
            .status(429)
            .retry_after_header(YEAR_9999)
    }))
    .poll()
    {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the attempt is ready at once"),
    };
    match out {
        // What the failure tells the caller (the gateway's `retry_after_ms`) is the
        // tool's pause, not the upstream's centuries.
        Err(toolgate::ExecuteError::Tool(f)) => {
            assert_eq!(f.reason, toolgate::StopReason::RetryAfterTooLong);
            assert_eq!(f.retry_after, Some(Duration::from_secs(120)));
        }
        other => panic!("expected the call to fail, got {other:?}"),
    }
    assert_rejected(
        engine.try_admit(&call),
        "rate_limited",
        "tools.t.retry_after",
        Some(Duration::from_secs(120)),
    );
}

#[test]
fn through_engine_run_a_retry_comes_when_the_bounded_pause_ends() {
    let (engine, clock) = engine(
        "[tools.t]\nrate = \"100/s\"\nidempotent = true\nmax_pause = \"2m\"\n\
         [tools.t.retry]\nmax_retry_after = \"10m\"\ndeadline = \"1h\"",
    );
    let call = Call::new("t");
    let mut run = task::spawn(engine.run(&call, RunOptions::new(), |ctx| async move {
        if ctx.number() == 1 {
            AttemptResult::failure("busy")
                .status(503)
                .retry_after_header(YEAR_9999)
        } else {
            AttemptResult::<_, &str>::success(ctx.number())
        }
    }));
    assert_pending!(run.poll());
    clock.advance(Duration::from_secs(120) - Duration::from_nanos(1));
    assert_pending!(run.poll());
    clock.advance(Duration::from_nanos(1));
    let out = assert_ready!(run.poll()).unwrap();
    assert_eq!(out.value, 2);
}

#[cfg(feature = "tower")]
#[test]
fn through_the_tower_layer_the_pause_is_bounded_too() {
    use tower::{Layer, ServiceExt};

    let (engine, _clock) = engine("[tools.t]\nrate = \"100/s\"\nmax_pause = \"2m\"");
    let client = tower::service_fn(|_: String| async {
        let resp = http::Response::builder()
            .status(429)
            .header("retry-after", YEAR_9999)
            .body(String::new())
            .unwrap();
        Ok::<_, std::convert::Infallible>(resp)
    });
    let svc = toolgate::layer::PipelineLayer::new(engine.clone(), |_: &String| {
        toolgate::layer::CallSpec::new("t")
    })
    .layer(client);
    match task::spawn(svc.oneshot("req".to_string())).poll() {
        Poll::Ready(r) => assert_eq!(r.unwrap().status(), 429),
        Poll::Pending => panic!("the attempt is ready at once"),
    }
    assert_rejected(
        engine.try_admit(&Call::new("t")),
        "rate_limited",
        "tools.t.retry_after",
        Some(Duration::from_secs(120)),
    );
}

const PER_TENANT: &str = r#"
[tools.t]
rate = "10/s"
burst = 1
partition = "tenant"
on_limit = "wait"
max_wait = "5s"
"#;

#[test]
fn a_retry_after_reported_through_one_tenant_pauses_that_tenant_only() {
    let (engine, clock) = engine(PER_TENANT);
    let (a, b) = (Call::new("t").tenant("a"), Call::new("t").tenant("b"));
    let failing = engine.try_admit(&a).unwrap();
    let _b = engine.try_admit(&b).unwrap();
    let mut wa = task::spawn(engine.admit(&a)); // due at 100 ms
    let mut wb = task::spawn(engine.admit(&b)); // due at 100 ms
    assert_pending!(wa.poll());
    assert_pending!(wb.poll());
    failing.complete(Completion::new(Outcome::Error).retry_after(Duration::from_secs(2)));
    // Tenant a is paused, and its waiter moved; b is not, nor are tenant-less calls
    // (the tenant "").
    assert_rejected(
        engine.try_admit(&a),
        "rate_limited",
        "tools.t.retry_after",
        Some(Duration::from_secs(2)),
    );
    assert!(engine.try_admit(&Call::new("t")).is_ok());
    clock.advance(ms(100));
    let pb = assert_ready!(wb.poll()).unwrap();
    assert_eq!(pb.waited(), ms(100));
    assert_pending!(wa.poll());
    clock.advance(ms(1_900));
    let pa = assert_ready!(wa.poll()).unwrap();
    assert_eq!(pa.waited(), Duration::from_secs(2));

    // A waiter's permit knows its tenant too, and so does a reservation's.
    pa.complete(Completion::new(Outcome::Error).retry_after(Duration::from_secs(1)));
    let c = Call::new("t").tenant("c");
    let reserved = engine.try_admit_all(&[c]).unwrap();
    for p in reserved {
        p.complete(Completion::new(Outcome::Error).retry_after(Duration::from_secs(1)));
    }
    clock.advance(ms(100));
    assert!(engine.try_admit(&a).is_err());
    assert!(engine.try_admit(&c).is_err());
    assert!(engine.try_admit(&b).is_ok());
}

#[test]
fn rate_limit_headers_reported_through_one_tenant_spread_that_tenants_calls_only() {
    let (engine, _clock) = engine("[tools.t]\nrate = \"10/s\"\nburst = 5\npartition = \"tenant\"");
    let (a, b) = (Call::new("t").tenant("a"), Call::new("t").tenant("b"));
    engine.try_admit(&a).unwrap().complete(headers(&[
        ("X-RateLimit-Limit", "100"),
        ("X-RateLimit-Remaining", "4"),
        ("X-RateLimit-Reset", "2"),
    ]));
    assert!(engine.try_admit(&a).is_ok(), "a's first slot");
    assert_rejected(
        engine.try_admit(&a),
        "rate_limited",
        "tools.t.server_limit",
        Some(ms(500)),
    );
    assert_eq!((0..4).filter(|_| engine.try_admit(&b).is_ok()).count(), 4);
}

#[test]
fn per_tenant_pauses_are_kept_for_at_most_max_partitions_tenants() {
    // A flood of tenants cannot grow the pauses without bound: past the cap, the
    // pause that ends soonest is dropped (its tenant may call again early).
    let (engine, clock) =
        engine("[tools.t]\nrate = \"10/s\"\npartition = \"tenant\"\nmax_partitions = 3");
    let names = ["t0", "t1", "t2", "t3", "t4"];
    for (i, name) in names.iter().enumerate() {
        let after = Duration::from_secs(10 * (i as u64 + 1));
        engine
            .try_admit(&Call::new("t").tenant(name))
            .unwrap()
            .complete(Completion::new(Outcome::Error).retry_after(after));
        clock.advance(ms(200)); // the tenant's partition is idle again
    }
    let admitted: Vec<bool> = names
        .iter()
        .map(|n| engine.try_admit(&Call::new("t").tenant(n)).is_ok())
        .collect();
    assert_eq!(admitted, [true, true, false, false, false]);
}
