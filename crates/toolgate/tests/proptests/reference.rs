//! Reference models of the quotas, formulated differently from the engine's, that a
//! run's admissions must conform to.

use super::{Admission, Event, Run};

/// Token bucket reference: tokens refill continuously at `n` per `period`, capped at
/// `burst`; the bucket starts full. A different formulation from the engine's GCRA.
pub(super) fn bucket_conforms(
    mut adm: Vec<(u64, u64)>,
    n: u64,
    period: u64,
    burst: u64,
) -> Result<(), String> {
    adm.sort_by_key(|a| a.0);
    let cap = i128::from(burst) * i128::from(period);
    let (mut level, mut last) = (cap, 0u64);
    for (at, cost) in adm {
        level = (level + i128::from(at - last) * i128::from(n)).min(cap);
        last = at;
        level -= i128::from(cost) * i128::from(period);
        if level < 0 {
            return Err(format!("over-admitted at {at} ns (cost {cost})"));
        }
    }
    Ok(())
}

pub(super) fn window_conforms(adm: &[(u64, u64)], limit: u64, period: u64) -> Result<(), String> {
    for &(t, _) in adm {
        let inside: u64 = adm
            .iter()
            .filter(|&&(u, _)| u <= t && u + period > t)
            .map(|a| a.1)
            .sum();
        if inside > limit {
            return Err(format!("{inside} admissions in the window ending at {t}"));
        }
    }
    Ok(())
}

pub(super) fn concurrency_conforms(r: &Run, tools: &[usize], limit: usize) -> Result<(), String> {
    let mut live = std::collections::BTreeSet::new();
    for e in &r.events {
        match *e {
            Event::Admitted { id } if tools.contains(&r.admissions[id].tool) => {
                live.insert(id);
                if live.len() > limit {
                    return Err(format!("{} in flight", live.len()));
                }
            }
            Event::Released { id } => {
                live.remove(&id);
            }
            Event::Admitted { .. } => {}
        }
    }
    Ok(())
}

pub(super) fn of(r: &Run, tools: &[usize], cost: impl Fn(&Admission) -> u64) -> Vec<(u64, u64)> {
    r.admissions
        .iter()
        .filter(|a| tools.contains(&a.tool) && !a.cancelled)
        .map(|a| (a.at, cost(a)))
        .collect()
}
