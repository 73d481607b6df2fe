//! The algorithms against simulated services.

use std::time::Duration;

use super::*;
use crate::config::Config;

fn adaptive(toml: &str) -> Adaptive {
    let config = Config::from_toml_str(&format!("[tools.t.adaptive]\n{toml}"))
        .unwrap_or_else(|e| panic!("{e}"));
    let a = config.tools["t"]
        .adaptive
        .clone()
        .unwrap_or_else(|| panic!("no adaptive"));
    Adaptive::new("t", a)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The original scenario: 50 calls, latency 100 ms → 300 ms after the 20th, failures at
/// calls 22, 25 and 28; target 150 ms, min 2, max 10.
#[test]
fn aimd_trajectory_of_the_original_scenario() {
    let a = adaptive("algorithm = \"aimd\"\ntarget_latency = \"150ms\"\nmin = 2\nmax = 10\ninitial = 4\nbackoff = 0.5");
    let mut trajectory = Vec::new();
    for call in 1..=50u64 {
        let latency = if call <= 20 { ms(100) } else { ms(300) };
        let outcome = if [22, 25, 28].contains(&call) {
            Outcome::Error
        } else {
            Outcome::Success
        };
        a.record(outcome, Some(latency));
        trajectory.push(a.limit());
    }
    // Grows by one per good call up to max, holds there while latency is on target,
    // then halves on every slow or failed call down to min, and stays there.
    assert_eq!(&trajectory[..8], &[5, 6, 7, 8, 9, 10, 10, 10]);
    assert!(trajectory[..20].iter().all(|&l| l <= 10));
    assert_eq!(trajectory[19], 10);
    assert_eq!(&trajectory[20..24], &[5, 2, 2, 2]);
    assert!(trajectory[20..].iter().all(|&l| l == 2 || l == 5));
    println!("AIMD limit trajectory: {trajectory:?}");
}

/// A service that answers in `base` up to `capacity` calls in flight and queues the
/// rest: latency grows in proportion beyond capacity.
fn service(capacity: u64, in_flight: u64) -> Duration {
    let base = 50.0;
    let l = if in_flight <= capacity {
        base
    } else {
        base * in_flight as f64 / capacity as f64
    };
    Duration::from_secs_f64(l / 1000.0)
}

/// Saturating clients keep the limit full; returns the mean limit over the last
/// hundred samples.
fn settle(a: &Adaptive, capacity: u64, samples: usize) -> f64 {
    let mut last = Vec::new();
    for i in 0..samples {
        let limit = a.limit().max(1);
        a.record(Outcome::Success, Some(service(capacity, limit)));
        if i + 100 >= samples {
            last.push(a.limit() as f64);
        }
    }
    last.iter().sum::<f64>() / last.len() as f64
}

#[test]
fn aimd_settles_near_capacity_and_recovers_with_the_service() {
    let a = adaptive(
        "algorithm = \"aimd\"\ntarget_latency = \"60ms\"\nmin = 1\nmax = 100\ninitial = 1",
    );
    for capacity in [8u64, 20, 8] {
        let mean = settle(&a, capacity, 600);
        let c = capacity as f64;
        assert!(
            (0.8 * c..=1.2 * c).contains(&mean),
            "capacity {capacity}: settled at {mean}"
        );
    }
}

#[test]
fn gradient_shrinks_when_latency_rises_and_grows_when_it_recovers() {
    // tolerance 1.0: settle where latency starts to rise, i.e. at capacity.
    let a = adaptive("algorithm = \"gradient\"\nmin = 1\nmax = 200\ninitial = 1\ntolerance = 1.0\nlong_window = 100");
    for capacity in [10u64, 40, 10] {
        let mean = settle(&a, capacity, 2_000);
        let c = capacity as f64;
        assert!(
            (0.8 * c..=1.2 * c).contains(&mean),
            "capacity {capacity}: settled at {mean}"
        );
    }
}

#[test]
fn errors_back_off_and_the_limit_stays_within_bounds() {
    let a = adaptive("algorithm = \"gradient\"\nmin = 3\nmax = 6\ninitial = 6\nbackoff = 0.5");
    for _ in 0..10 {
        a.record(Outcome::Timeout, Some(ms(10)));
    }
    assert_eq!(a.limit(), 3);
    for _ in 0..1000 {
        a.record(Outcome::Success, Some(ms(10)));
    }
    assert_eq!(a.limit(), 6);
}
