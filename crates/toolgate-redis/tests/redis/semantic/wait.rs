//! Waiting (`on_limit = "wait"`): a waiter sleeps until the time it reserved, gives it
//! back when it leaves first, and a wait cap refuses a longer wait at once.

use std::time::Duration;

use toolgate::{Call, Reason};

use super::{why, MS};
use crate::backend::{Backend, Factory};

/// Wait mode: the predicted wait is checked up front, then the call sleeps until its
/// reserved time.
pub async fn waiters_sleep_until_their_reserved_time<F: Factory>(f: &F) {
    let b = f
        .make("[tools.w]\nrate = \"10/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"1s\"")
        .await;
    let first = b.admit(&Call::new("w")).await.expect("immediate");
    assert_eq!(<F::B as Backend>::waited(&first), Duration::ZERO);
    let second_call = Call::new("w");
    let (second, ()) = tokio::join!(b.admit(&second_call), async {
        while b.clock().sleepers() == 0 {
            tokio::time::sleep(MS).await;
        }
        // The second reserved 100 ms; a third would wait 200 ms, more than it accepts.
        let no = b
            .admit(&Call::new("w").max_wait(Duration::from_millis(150)))
            .await
            .expect_err("predicted wait too long");
        assert_eq!(
            why(&no),
            (Reason::MaxWaitExceeded, "tools.w.rate", Some(200 * MS))
        );
        b.clock().advance(100 * MS);
    });
    let second = second.expect("admitted after waiting");
    assert_eq!(<F::B as Backend>::waited(&second), 100 * MS);
}

/// A waiter that leaves before its time gives its reservation back.
pub async fn a_cancelled_waiter_gives_its_time_back<F: Factory>(f: &F) {
    let b = f
        .make("[tools.w]\nrate = \"10/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"1s\"")
        .await;
    let first = b.admit(&Call::new("w")).await.expect("immediate");
    let waiter = Call::new("w");
    tokio::select! {
        r = b.admit(&waiter) => panic!("the waiter cannot be admitted before its time: {r:?}"),
        () = async {
            while b.clock().sleepers() == 0 {
                tokio::time::sleep(MS).await;
            }
        } => {}
    }
    // The waiter is gone (its future dropped); its reserved slot at +100 ms is free.
    b.settle().await;
    b.clock().advance(100 * MS);
    assert!(
        b.try_admit(&Call::new("w")).await.is_ok(),
        "the slot came back"
    );
    let no = b
        .try_admit(&Call::new("w"))
        .await
        .expect_err("one per 100 ms");
    assert_eq!(no.retry_after(), Some(100 * MS));
    drop(first);
}

/// A wait cap (a caller's own deadline, issue #13 item 9) bounds the tool's
/// `max_wait`: a longer predicted wait is refused at once, charging nothing.
pub async fn a_wait_cap_refuses_a_longer_wait_at_once<F: Factory>(f: &F) {
    let b = f
        .make("[tools.w]\nrate = \"10/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"1s\"")
        .await;
    let first = b.admit(&Call::new("w")).await.expect("immediate");
    let capped = Call::new("w").cap_wait(50 * MS);
    // Bounded in real time: a call that ignored its cap would sleep on the manual clock.
    let no = tokio::time::timeout(Duration::from_secs(5), b.admit(&capped))
        .await
        .expect("refused at once, not left waiting")
        .expect_err("the next slot is 100 ms away, beyond the cap");
    assert_eq!(
        why(&no),
        (Reason::MaxWaitExceeded, "tools.w.rate", Some(100 * MS))
    );
    b.clock().advance(100 * MS);
    assert!(
        b.try_admit(&Call::new("w")).await.is_ok(),
        "nothing charged"
    );
    drop(first);
}
