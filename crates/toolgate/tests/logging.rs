//! What the engine logs. One test binary with one test and a process-wide
//! subscriber: a subscriber scoped to one test thread raced the other tests' threads
//! over the warning's cached callsite interest, and now and then saw nothing.

#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use toolgate::{Call, Completion, Engine, ManualClock, Outcome, Policy};

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_clamped_signal_is_logged_once_at_warn_with_both_durations() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber)
        .expect("the only subscriber of this test binary");
    let engine = Engine::with_clock(
        Policy::from_toml_str("[tools.crm]\nrate = \"100/s\"").unwrap(),
        Arc::new(ManualClock::new()),
    );
    let call = Call::new("crm").tenant("acme");
    engine
        .try_admit(&call)
        .unwrap()
        .complete(Completion::new(Outcome::Error).retry_after(Duration::from_secs(3_600)));
    // Within max_pause: nothing to warn about.
    engine
        .try_admit(&Call::new("other"))
        .unwrap()
        .complete(Completion::new(Outcome::Error).retry_after(Duration::from_secs(1)));
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let line = lines[0];
    for part in [
        "WARN",
        "tool=\"crm\"",
        "signal=\"Retry-After\"",
        "asked_ms=3600000",
        "max_pause_ms=300000",
    ] {
        assert!(line.contains(part), "{part} missing from {line}");
    }
    assert!(!line.contains("acme"), "{line}");
}
