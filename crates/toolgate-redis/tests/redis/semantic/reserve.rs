//! Reservations (several calls admitted together) give back exactly what an unused
//! part charged, on every backend.

use toolgate::{Call, Reason};

use super::{why, MS};
use crate::backend::{Backend, Factory};

/// An unused part of a reservation gives back everything it charged: request
/// bucket (the pool's), token budget, sliding entry and concurrency slot. (One tool
/// and its pool: in a Redis Cluster a plan's quotas share one slot group.)
pub async fn an_unused_reservation_gives_its_charges_back<F: Factory>(f: &F) {
    let b = f
        .make(
            "[pools.p]\nrate = \"2/h\"\n\
             [tools.r]\nrate = \"2/h\"\nwindow = \"sliding\"\ntokens = \"2/h\"\n\
             concurrency = 2\npools = [\"p\"]",
        )
        .await;
    let r = Call::new("r").tokens(1);
    let mut parts = b.try_admit_all(&[r, r]).await.expect("the plan fits");
    assert!(b.try_admit(&r).await.is_err(), "every quota of r is spent");
    // Give one part back; the other stays held.
    let part = parts.pop().expect("two parts");
    b.cancel(part).await;
    let again = b
        .try_admit(&r)
        .await
        .expect("all four quotas gave one back");
    // Exactly one: nothing was given back twice.
    let no = b.try_admit(&r).await.expect_err("spent again");
    assert_eq!(no.reason(), Reason::RateLimited, "{no:?}");
    drop((again, parts));
}

/// A part given back later does not refund the refill its bucket would have wasted
/// while full: the result is exactly "as if never reserved".
pub async fn a_late_give_back_never_refunds_wasted_refill<F: Factory>(f: &F) {
    let b = f.make("[tools.t]\nrate = \"2/s\"\nburst = 2").await;
    let t = Call::new("t");
    // Reserved from a full bucket at 0; another call at 1 ms; the part given back then.
    let mut part = b.try_admit_all(&[t]).await.expect("fits");
    b.clock().advance(MS);
    let first = b.try_admit(&t).await.expect("the second token");
    b.cancel(part.pop().expect("one part")).await;
    let second = b.try_admit(&t).await.expect("the part's token came back");
    // Had the part never been reserved, the bucket was full until 1 ms: two calls at
    // 1 ms leave the next token at 501 ms, not at 500 ms.
    let no = b.try_admit(&t).await.expect_err("empty");
    assert_eq!(
        why(&no),
        (Reason::RateLimited, "tools.t.rate", Some(500 * MS))
    );
    drop((first, second));
}
