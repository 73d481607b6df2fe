//! What decides while Redis does not answer (`on_store_error`); under `"local"`, an
//! in-process engine holding `local_share` of every quota.
//!
//! Why a share: while Redis is unreachable every process decides alone, so each may
//! only spend its share of the shared quota. With `local_share = 1 / processes`, the
//! processes together stay within the quota; with more processes than that, they can
//! over-admit by the ratio. Counts round down, but never below 1.

use std::sync::Arc;
use std::time::Duration;

use toolgate::config::{Config, OnStoreError, QuotaConfig, Rate, StoreConfig};
use toolgate::{Call, Clock, Engine, Policy, Rejection};

use crate::error::StoreError;
use crate::permit::{Held, RedisPermit};

/// What decides while Redis does not answer, by `on_store_error`: nobody
/// (`fail_open`), an in-process engine (`local`), or a refusal (`fail_closed`).
#[derive(Debug)]
pub(crate) struct Fallback {
    on_error: OnStoreError,
    /// The in-process engine of `on_store_error = "local"`, if that is the mode.
    engine: Option<Engine>,
}

// === impl Fallback ===

impl Fallback {
    /// The fallback of `store` for `policy`; under `local`, an engine on `clock` (or
    /// the system clock) holding `local_share` of every quota.
    ///
    /// The engine's own metrics go to a no-op recorder: the engine on the store counts
    /// every decision, the fallback's included, so the fallback counting them as well
    /// would count them twice.
    ///
    /// # Errors
    ///
    /// When the scaled policy does not validate (it always should).
    pub(crate) fn new(
        store: &StoreConfig,
        policy: &Policy,
        clock: Option<&Arc<dyn Clock>>,
    ) -> Result<Self, StoreError> {
        let on_error = store.on_store_error;
        if on_error != OnStoreError::Local {
            return Ok(Self {
                on_error,
                engine: None,
            });
        }
        let p = scaled_policy(policy.config(), store.local_share)?;
        let engine = metrics::with_local_recorder(&metrics::NoopRecorder, || match clock {
            Some(c) => Engine::with_clock(p, c.clone()),
            None => Engine::new(p),
        });
        Ok(Self {
            on_error,
            engine: Some(engine),
        })
    }

    /// The `on_store_error` mode.
    pub(crate) fn on_error(&self) -> OnStoreError {
        self.on_error
    }

    /// The decision on `call` (of `tool`) while Redis does not answer; `wait`: the
    /// local engine may wait as the tool says.
    ///
    /// # Errors
    ///
    /// The local engine's [`Rejection`], or [`Rejection::store_unavailable`] under
    /// `fail_closed`.
    pub(crate) async fn admit(
        &self,
        tool: &Arc<str>,
        call: &Call<'_>,
        wait: bool,
    ) -> Result<RedisPermit, Rejection> {
        match (self.on_error, &self.engine) {
            (OnStoreError::FailOpen, _) => Ok(RedisPermit::new(Held::Unaccounted, Duration::ZERO)),
            (OnStoreError::Local, Some(engine)) => {
                let p = if wait {
                    engine.admit(call).await?
                } else {
                    engine.try_admit(call)?
                };
                let waited = p.waited();
                Ok(RedisPermit::new(Held::Local(p), waited))
            }
            _ => Err(Rejection::store_unavailable(tool.clone())),
        }
    }

    /// The decision on `calls` together, now or never, while Redis does not answer;
    /// `first` is the tool a refusal names.
    ///
    /// # Errors
    ///
    /// As [`Fallback::admit`].
    pub(crate) fn admit_all(
        &self,
        first: &Arc<str>,
        calls: &[Call<'_>],
    ) -> Result<Vec<RedisPermit>, Rejection> {
        match (self.on_error, &self.engine) {
            (OnStoreError::FailOpen, _) => Ok(calls
                .iter()
                .map(|_| RedisPermit::new(Held::Unaccounted, Duration::ZERO))
                .collect()),
            (OnStoreError::Local, Some(engine)) => Ok(engine
                .try_admit_all(calls)?
                .into_iter()
                .map(|p| RedisPermit::new(Held::Local(p), Duration::ZERO))
                .collect()),
            _ => Err(Rejection::store_unavailable(first.clone())),
        }
    }
}

/// `config` with every quota scaled by `share` (and no store), as a policy.
///
/// # Errors
///
/// When the scaled config does not validate (it always should).
pub(crate) fn scaled_policy(config: &Config, share: f64) -> Result<Policy, StoreError> {
    let mut c = config.clone();
    c.store = None;
    for q in c.pools.values_mut() {
        scale_quota(q, share);
    }
    for t in c.tools.values_mut() {
        scale_quota(&mut t.quota, share);
    }
    Policy::new(c).map_err(|e| StoreError::Config {
        key: "local_share",
        message: format!("the scaled local policy is invalid: {e}"),
    })
}

fn scale_quota(q: &mut QuotaConfig, share: f64) {
    if let Some(rate) = q.rate {
        q.burst = Some(scale(q.burst.unwrap_or(rate.count()), share));
        q.rate = Some(scale_rate(rate, share));
    }
    if let Some(tokens) = q.tokens {
        q.tokens_burst = Some(scale(q.tokens_burst.unwrap_or(tokens.count()), share));
        q.tokens = Some(scale_rate(tokens, share));
    }
    if let Some(k) = q.concurrency {
        let scaled = scale(u64::from(k), share);
        q.concurrency = Some(u32::try_from(scaled).unwrap_or(k));
    }
}

fn scale_rate(rate: Rate, share: f64) -> Rate {
    Rate::try_new(scale(rate.count(), share), rate.period()).unwrap_or(rate)
}

/// `n × share`, rounded down, at least 1.
fn scale(n: u64, share: f64) -> u64 {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let scaled = (n as f64 * share).floor() as u64;
    scaled.clamp(1, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_quota_is_scaled_down_but_never_to_zero() {
        let config = Config::from_toml_str(
            r#"
            [pools.crm]
            rate = "100/min"
            burst = 20
            [tools.t]
            rate = "50/s"
            tokens = "40000/min"
            concurrency = 4
            pools = ["crm"]
            "#,
        )
        .expect("valid");
        let p = scaled_policy(&config, 0.1).expect("valid");
        let t = &p.tools["t"].quota;
        assert_eq!(t.rate.map(|r| r.count()), Some(5));
        assert_eq!(t.burst, Some(5));
        assert_eq!(t.tokens.map(|r| r.count()), Some(4000));
        assert_eq!(t.concurrency, Some(1));
        let crm = &p.pools["crm"];
        assert_eq!(
            (crm.rate.map(|r| r.count()), crm.burst),
            (Some(10), Some(2))
        );
    }
}
