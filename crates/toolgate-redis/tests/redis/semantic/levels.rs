//! What each quota has left, as [`toolgate::Engine::fetch_tool_state`] reads it:
//! the same figures on every backend, read without charging anything.

use std::time::Duration;

use toolgate::{Call, Completion};

use crate::backend::{Backend, Factory};

use super::admitted;

/// `(quota, kind, capacity, available)` of each quota of `tool`, in order.
async fn levels<B: Backend>(
    b: &B,
    tool: &str,
    tenant: Option<&str>,
) -> Vec<(String, &'static str, u64, Option<u64>)> {
    let s = b.state(tool, tenant).await.expect("a tool with a policy");
    s.quotas
        .into_iter()
        .map(|q| (q.quota, q.kind, q.capacity, q.available))
        .collect()
}

/// The `available` figures of `tool`'s quotas, in order.
async fn left<B: Backend>(b: &B, tool: &str, tenant: Option<&str>) -> Vec<Option<u64>> {
    levels(b, tool, tenant)
        .await
        .into_iter()
        .map(|l| l.3)
        .collect()
}

/// Every kind of quota reports what it has left: a fractional request bucket, a
/// token budget, a concurrency limit and a pool's sliding window, before and after
/// admissions, a refill, a reconciliation and a release. Reading changes nothing:
/// what the figures say is exactly what can still be admitted.
pub async fn levels_say_what_each_quota_has_left<F: Factory>(f: &F) {
    let b = f
        .make(
            r#"
            [pools.crm]
            rate = "4/min"
            window = "sliding"
            [tools.t]
            rate = "3/s"
            tokens = "1000/min"
            concurrency = 2
            pools = ["crm"]
            "#,
        )
        .await;
    assert_eq!(
        levels(&b, "t", None).await,
        [
            ("tools.t.rate".to_string(), "rate", 3, Some(3)),
            ("tools.t.tokens".to_string(), "tokens", 1000, Some(1000)),
            ("tools.t.concurrency".to_string(), "concurrency", 2, Some(2)),
            ("pools.crm.rate".to_string(), "sliding", 4, Some(4)),
        ]
    );
    assert!(b.state("nope", None).await.is_none(), "no policy, no state");
    let t = Call::new("t").tokens(300);
    let first = b.try_admit(&t).await.expect("fits");
    assert_eq!(
        left(&b, "t", None).await,
        [Some(2), Some(700), Some(1), Some(3)]
    );
    // Read twice: nothing was charged by the first read.
    assert_eq!(
        left(&b, "t", None).await,
        [Some(2), Some(700), Some(1), Some(3)]
    );
    b.complete(first, Completion::success().tokens(100)).await;
    // The estimate is reconciled (200 back) and the slot released.
    assert_eq!(
        left(&b, "t", None).await,
        [Some(2), Some(900), Some(2), Some(3)]
    );
    // 334 ms refill one request (a third of a second, which Redis' whole µs
    // reach at 333,334) and 5.57 tokens: 5 whole ones.
    b.clock().advance(Duration::from_millis(334));
    assert_eq!(
        left(&b, "t", None).await,
        [Some(3), Some(905), Some(2), Some(3)]
    );
    // The figures are what can be admitted: three now, the window's third is its last.
    let held = admitted(&b, &Call::new("t").tokens(1), 4).await;
    assert_eq!(held.len(), 2, "the concurrency limit admits two");
    assert_eq!(
        left(&b, "t", None).await,
        [Some(1), Some(903), Some(0), Some(1)]
    );
    drop(held);
    b.settle().await;
    assert_eq!(
        left(&b, "t", None).await,
        [Some(1), Some(903), Some(2), Some(1)]
    );
    assert!(b.try_admit(&Call::new("t").tokens(1)).await.is_ok());
    b.settle().await;
    assert_eq!(
        left(&b, "t", None).await,
        [Some(0), Some(902), Some(2), Some(0)]
    );
    let no = b.try_admit(&Call::new("t").tokens(1)).await;
    assert!(no.is_err(), "nothing left: {no:?}");
    // A minute on, the window is empty again and the buckets full.
    b.clock().advance(Duration::from_secs(60));
    assert_eq!(
        left(&b, "t", None).await,
        [Some(3), Some(1000), Some(2), Some(4)]
    );
}

/// A partitioned quota reports the tenant's own partition (a tenant never seen
/// has a full one), and no figure without a tenant.
pub async fn levels_of_a_partition_are_the_tenants_own<F: Factory>(f: &F) {
    let b = f
        .make(
            r#"
            [tools.p]
            rate = "2/s"
            partition = "tenant"
            [pools.all]
            rate = "10/s"
            [tools.q]
            rate = "5/s"
            partition = "tenant"
            pools = ["all"]
            "#,
        )
        .await;
    assert!(b.try_admit(&Call::new("p").tenant("acme")).await.is_ok());
    assert_eq!(left(&b, "p", Some("acme")).await, [Some(1)]);
    assert_eq!(left(&b, "p", Some("globex")).await, [Some(2)]);
    assert_eq!(left(&b, "p", None).await, [None]);
    // A shared pool beside a partitioned rate: the pool's figure is everyone's.
    assert!(b.try_admit(&Call::new("q").tenant("acme")).await.is_ok());
    assert!(b.try_admit(&Call::new("q").tenant("globex")).await.is_ok());
    assert_eq!(left(&b, "q", Some("acme")).await, [Some(4), Some(8)]);
    assert_eq!(left(&b, "q", None).await, [None, Some(8)]);
}

/// Every tool's state read at once (a state endpoint's list): the same figures as
/// one tool at a time, for a policy of 150 tools (more quotas than one read takes,
/// and on a cluster as many slot groups), a pool shared by two of them, and a
/// tenant's partitions.
pub async fn levels_of_every_tool_are_read_at_once<F: Factory>(f: &F) {
    let mut toml = String::from("[pools.crm]\nrate = \"10/min\"\n");
    for i in 0..150 {
        toml.push_str(&format!("[tools.t{i:03}]\nrate = \"{}/min\"\n", i + 1));
        if i < 2 {
            toml.push_str("pools = [\"crm\"]\n");
        }
        if i == 149 {
            toml.push_str("partition = \"tenant\"\n");
        }
    }
    let b = f.make(&toml).await;
    for (tool, n) in [("t000", 1), ("t001", 2), ("t099", 7)] {
        assert_eq!(admitted(&b, &Call::new(tool), n).await.len(), n, "{tool}");
    }
    assert!(b.try_admit(&Call::new("t149").tenant("acme")).await.is_ok());
    let all = b.states(Some("acme")).await;
    assert_eq!(all.len(), 150);
    for s in &all {
        let one = b.state(&s.tool, Some("acme")).await.expect("a tool");
        assert_eq!(s.quotas, one.quotas, "{}", s.tool);
    }
    let left = |tool: &str| {
        let s = all.iter().find(|s| s.tool == tool).expect("listed");
        s.quotas.iter().map(|q| q.available).collect::<Vec<_>>()
    };
    assert_eq!(left("t000"), [Some(0), Some(7)]);
    assert_eq!(left("t001"), [Some(0), Some(7)]);
    assert_eq!(left("t002"), [Some(3)]);
    assert_eq!(left("t099"), [Some(93)]);
    assert_eq!(left("t149"), [Some(149)]);
    // Without a tenant, the partitioned quota has no figure; the rest are the same.
    let all = b.states(None).await;
    let t149 = all.iter().find(|s| s.tool == "t149").expect("listed");
    assert_eq!(t149.quotas[0].available, None);
    let t099 = all.iter().find(|s| s.tool == "t099").expect("listed");
    assert_eq!(t099.quotas[0].available, Some(93));
}
