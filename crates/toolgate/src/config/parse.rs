//! From a value tree to a [`Config`]: shapes and single values. Rules that span
//! several values live in `Config::check`.

use std::time::Duration;

use serde_json::Value;

use super::section::{int_in, one_of, FromValue, Section};
use super::{
    resilience, Config, ConfigError, Fairness, Mode, OnLimit, Partition, QuotaConfig, Rate,
    ToolConfig, UnknownTools, Window, MAX_COUNT,
};

/// A tool table before `[defaults]` and built-in defaults are applied.
#[derive(Default, Clone)]
struct RawTool {
    quota: QuotaConfig,
    pools: Option<Vec<String>>,
    on_limit: Option<OnLimit>,
    max_wait: Option<Duration>,
    queue_limit: Option<usize>,
    max_pause: Option<Duration>,
    idempotent: Option<bool>,
    circuit: Option<super::CircuitConfig>,
    retry: Option<super::RetryConfig>,
    adaptive: Option<super::AdaptiveConfig>,
    upstream: Option<super::UpstreamConfig>,
}

pub(super) fn config(value: &Value, errors: &mut Vec<ConfigError>) -> Option<Config> {
    let mut top = Section::open("", value, errors)?;
    let unknown_tools = top
        .get_with("unknown_tools", |v| {
            one_of(
                v,
                &[("allow", UnknownTools::Allow), ("deny", UnknownTools::Deny)],
            )
        })
        .unwrap_or_default();
    let mode = top.get::<Mode>("mode").unwrap_or_default();
    let defaults = top
        .raw("defaults")
        .and_then(|v| Section::open("defaults", v, top.errors()))
        .map(|s| tool(s, true))
        .unwrap_or_default();
    let mut config = Config {
        unknown_tools,
        mode,
        ..Config::default()
    };
    if let Some(v) = top.raw("pools") {
        if let Some(mut pools) = Section::open("pools", v, top.errors()) {
            for (name, v) in table_entries(v) {
                let path = pools.child_path(name);
                if let Some(mut s) = Section::open(path, v, pools.errors()) {
                    let q = quota(&mut s);
                    s.finish();
                    config.pools.insert(name.clone(), q);
                }
            }
        }
    }
    if let Some(v) = top.raw("tools") {
        if let Some(mut tools) = Section::open("tools", v, top.errors()) {
            for (name, v) in table_entries(v) {
                let path = tools.child_path(name);
                if let Some(s) = Section::open(path, v, tools.errors()) {
                    let raw = tool(s, false);
                    config
                        .tools
                        .insert(name.clone(), finish_tool(raw, &defaults));
                }
            }
        }
    }
    if let Some(v) = top.raw("tenants") {
        config.tenants = super::fairness::tenants(v, top.errors());
    }
    if let Some(v) = top.raw("store") {
        config.store = Section::open("store", v, top.errors()).and_then(|mut s| {
            let store = resilience::store(&mut s);
            s.finish();
            store
        });
    }
    top.finish();
    Some(config)
}

fn table_entries(v: &Value) -> impl Iterator<Item = (&String, &Value)> {
    v.as_object().into_iter().flatten()
}

fn quota(s: &mut Section<'_, '_>) -> QuotaConfig {
    QuotaConfig {
        rate: s.get_with("rate", |v| {
            Rate::parse_as(super::section::expect_str(v)?, "request")
        }),
        burst: s.get_with("burst", |v| int_in(v, 1, MAX_COUNT)),
        window: s.get::<Window>("window").unwrap_or_default(),
        tokens: s.get_with("tokens", |v| {
            Rate::parse_as(super::section::expect_str(v)?, "token")
        }),
        tokens_burst: s.get_with("tokens_burst", |v| int_in(v, 1, MAX_COUNT)),
        concurrency: s
            .get_with("concurrency", |v| int_in(v, 1, u64::from(u32::MAX)))
            .and_then(|n| u32::try_from(n).ok()),
        partition: s.get_with("partition", |v| one_of(v, &[("tenant", Partition::Tenant)])),
        mode: s.get::<Mode>("mode"),
        max_partitions: s
            .get_with("max_partitions", |v| int_in(v, 1, 1 << 32))
            .and_then(|n| usize::try_from(n).ok()),
        fairness: s.get_with("fairness", |v| one_of(v, &[("tenant", Fairness::Tenant)])),
        reserve: super::fairness::reserve(s),
    }
}

fn tool(mut sec: Section<'_, '_>, is_defaults: bool) -> RawTool {
    let s = &mut sec;
    let raw = RawTool {
        quota: quota(s),
        pools: s.get::<Vec<String>>("pools"),
        on_limit: s.get_with("on_limit", |v| {
            one_of(v, &[("reject", OnLimit::Reject), ("wait", OnLimit::Wait)])
        }),
        max_wait: s.get::<Duration>("max_wait"),
        queue_limit: s
            .get_with("queue_limit", |v| int_in(v, 1, 1 << 24))
            .and_then(|n| usize::try_from(n).ok()),
        // Bounded here too, so that `[defaults]` is named when it breaks the rule.
        max_pause: s.get_with("max_pause", |v| {
            super::bounds::max_pause(Duration::from_value(v)?, v.as_str().unwrap_or_default())
        }),
        idempotent: s.get::<bool>("idempotent"),
        circuit: sub(s, "circuit", resilience::circuit),
        retry: sub(s, "retry", resilience::retry),
        adaptive: sub(s, "adaptive", resilience::adaptive),
        upstream: if is_defaults {
            None
        } else {
            sub(s, "upstream", resilience::upstream)
        },
    };
    sec.finish();
    raw
}

fn sub<T>(
    s: &mut Section<'_, '_>,
    key: &'static str,
    read: fn(&mut Section<'_, '_>) -> Option<T>,
) -> Option<T> {
    let v = s.raw(key)?;
    let path = s.child_path(key);
    let mut sub = Section::open(path, v, s.errors())?;
    let t = read(&mut sub);
    sub.finish();
    t
}

fn finish_tool(raw: RawTool, d: &RawTool) -> ToolConfig {
    let q = raw.quota;
    let dq = &d.quota;
    let base = ToolConfig::new();
    ToolConfig {
        quota: QuotaConfig {
            rate: q.rate.or(dq.rate),
            burst: q.burst.or(if q.rate.is_some() { None } else { dq.burst }),
            window: if q.rate.is_some() || q.window != Window::Bucket {
                q.window
            } else {
                dq.window
            },
            tokens: q.tokens.or(dq.tokens),
            tokens_burst: q.tokens_burst.or(if q.tokens.is_some() {
                None
            } else {
                dq.tokens_burst
            }),
            concurrency: q.concurrency.or(dq.concurrency),
            partition: q.partition.or(dq.partition),
            mode: q.mode.or(dq.mode),
            max_partitions: q.max_partitions.or(dq.max_partitions),
            fairness: q.fairness.or(dq.fairness),
            reserve: if q.reserve.is_empty() {
                dq.reserve
            } else {
                q.reserve
            },
        },
        pools: raw.pools.or_else(|| d.pools.clone()).unwrap_or_default(),
        on_limit: raw.on_limit.or(d.on_limit).unwrap_or(base.on_limit),
        max_wait: raw.max_wait.or(d.max_wait).unwrap_or(base.max_wait),
        queue_limit: raw
            .queue_limit
            .or(d.queue_limit)
            .unwrap_or(base.queue_limit),
        max_pause: raw.max_pause.or(d.max_pause).unwrap_or(base.max_pause),
        idempotent: raw.idempotent.or(d.idempotent).unwrap_or(base.idempotent),
        circuit: raw.circuit.or_else(|| d.circuit.clone()),
        retry: raw.retry.or_else(|| d.retry.clone()),
        adaptive: raw.adaptive.or_else(|| d.adaptive.clone()),
        upstream: raw.upstream,
    }
}

impl FromValue for Mode {
    fn from_value(v: &Value) -> Result<Self, String> {
        one_of(v, &[("enforce", Mode::Enforce), ("shadow", Mode::Shadow)])
    }
}

impl FromValue for Window {
    fn from_value(v: &Value) -> Result<Self, String> {
        one_of(
            v,
            &[("bucket", Window::Bucket), ("sliding", Window::Sliding)],
        )
    }
}
