//! The reproducible demonstration of the original request: a slow customer lookup at
//! 2 req/s burst 2 and a fast document search, called concurrently.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use toolgate::{Call, ExecuteError};

use crate::support::{engine, ms};

const POLICY: &str = r#"
[tools.slow_customer_lookup]
rate = "2/s"
burst = 2

[tools.fast_document_search]
rate = "10/s"
"#;

async fn slow_customer_lookup(runs: &AtomicUsize) -> Result<&'static str, String> {
    runs.fetch_add(1, Ordering::SeqCst);
    // Stay in flight across a poll so the five calls overlap.
    tokio::task::yield_now().await;
    Ok("customer")
}

#[tokio::test]
async fn five_concurrent_lookups_admit_two_and_reject_three_before_the_body_runs() {
    let (engine, clock) = engine(POLICY);
    let runs = AtomicUsize::new(0);
    let lookup = Call::new("slow_customer_lookup");

    // (1) five concurrent lookups start.
    let calls = (0..5).map(|_| engine.execute(&lookup, || slow_customer_lookup(&runs)));
    let results = futures_join_all(calls).await;

    // (2) exactly two are admitted; (3) the other three are rejected before the tool
    // body runs.
    let admitted = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(admitted, 2);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    for r in results.iter().filter(|r| r.is_err()) {
        let Err(ExecuteError::Rejected(rej)) = r else {
            panic!("expected a rejection, got {r:?}");
        };
        assert_eq!(rej.reason().as_str(), "rate_limited");
        assert_eq!(rej.quota(), "tools.slow_customer_lookup.rate");
        assert_eq!(rej.retry_after(), Some(ms(500)));
    }

    // (4) the document search is admitted normally meanwhile.
    let search = engine
        .execute(&Call::new("fast_document_search"), || async {
            Ok::<_, String>("docs")
        })
        .await;
    assert_eq!(search, Ok("docs"));

    // (5) advance the clock; (6) capacity refills exactly as the policy says.
    clock.advance(ms(499));
    assert!(engine.try_admit(&lookup).is_err(), "not before 0.5 s");
    clock.advance(ms(1));
    assert!(engine.try_admit(&lookup).is_ok(), "one more at 0.5 s");
    assert!(engine.try_admit(&lookup).is_err());
    // From empty, a whole second refills both tokens, and no more.
    clock.advance(ms(1000));
    assert!(engine.try_admit(&lookup).is_ok());
    assert!(engine.try_admit(&lookup).is_ok());
    assert!(engine.try_admit(&lookup).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_simultaneous_calls_on_many_threads_cannot_bypass_the_limit() {
    let (engine, _clock) = engine(POLICY);
    let runs = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(1000));
    let tasks: Vec<_> = (0..1000)
        .map(|_| {
            let (engine, runs, start) = (engine.clone(), runs.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                engine
                    .execute(&Call::new("slow_customer_lookup"), || async {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, ()>(())
                    })
                    .await
                    .is_ok()
            })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += usize::from(t.await.unwrap());
    }
    assert_eq!(admitted, 2);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// Polls every future concurrently to completion (no extra dependency needed).
async fn futures_join_all<F: std::future::Future>(
    futs: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    let mut futs: Vec<_> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.unwrap()).collect()
}
