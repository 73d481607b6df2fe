//! The token debt bound (issue #13, item 2), on every backend: a completion that
//! reports more tokens than estimated, of any size, leaves the budget at most one
//! burst in debt, with the same `retry_after` everywhere and no error.

use toolgate::{Call, Completion, Reason};

use super::{why, MS};
use crate::backend::{Backend, Factory};

const PATH: &str = "tools.llm.tokens";

/// `tokens = "100/s"` (burst 100), estimated 10, completed with ever larger counts:
/// at most one burst owed beyond empty, so the next token comes 1 s + 10 ms later
/// and the budget is full again within 2·burst/rate; a count below the bound is
/// charged in full.
pub async fn a_reported_token_count_owes_at_most_one_burst<F: Factory>(f: &F) {
    for (actual, next) in [
        (u64::MAX, 1010),
        ((1 << 53) - 1, 1010),
        (250, 1010),
        (150, 510),
    ] {
        let b = f.make("[tools.llm]\ntokens = \"100/s\"").await;
        let p = b
            .try_admit(&Call::new("llm").tokens(10))
            .await
            .expect("fits");
        // On Redis, completing fails if the script raises an error.
        b.complete(p, Completion::success().tokens(actual)).await;
        let no = b
            .try_admit(&Call::new("llm").tokens(1))
            .await
            .expect_err("in debt");
        assert_eq!(
            why(&no),
            (Reason::TokensLimited, PATH, Some(next * MS)),
            "{actual}"
        );
        b.clock().advance(2000 * MS);
        assert!(
            b.try_admit(&Call::new("llm").tokens(100)).await.is_ok(),
            "{actual}: full again within 2·burst/rate"
        );
    }
}

/// Behind a waiter's reservation, the count is charged after it (the waiter keeps
/// its time) and the debt is bounded from the reserved time: one burst owed beyond
/// empty at 500 ms, so the next token comes at 500 + 1000 + 10 ms.
pub async fn a_token_debt_behind_a_waiter_owes_at_most_one_burst_from_it<F: Factory>(f: &F) {
    let b = f
        .make("[tools.llm]\ntokens = \"100/s\"\non_limit = \"wait\"\nmax_wait = \"1h\"")
        .await;
    let first = b
        .try_admit(&Call::new("llm").tokens(100))
        .await
        .expect("fits");
    let waiter = Call::new("llm").tokens(50);
    let (admitted, ()) = tokio::join!(b.admit(&waiter), async {
        while b.clock().sleepers() == 0 {
            tokio::time::sleep(MS).await;
        }
        b.complete(first, Completion::success().tokens(u64::MAX))
            .await;
        let no = b
            .try_admit(&Call::new("llm").tokens(1))
            .await
            .expect_err("in debt");
        assert_eq!(why(&no), (Reason::TokensLimited, PATH, Some(1510 * MS)));
        b.clock().advance(500 * MS);
    });
    let admitted = admitted.expect("the waiter keeps its time");
    assert_eq!(<F::B as Backend>::waited(&admitted), 500 * MS);
}
