//! The retry pipeline as a tower layer (`PipelineLayer`).

use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use toolgate::layer::{CallSpec, PipelineLayer, RunReport};
use toolgate::{Rejection, RunFailure, StopReason};
use tower::{service_fn, Layer, ServiceExt};

use super::*;

/// A fake HTTP client: answers the statuses (and Retry-After) in turn.
fn client(
    answers: &'static [(u16, Option<&'static str>)],
) -> (
    impl tower::Service<
            String,
            Response = http::Response<String>,
            Error = Infallible,
            Future = impl Send,
        > + Clone
        + Send
        + 'static,
    Arc<AtomicU32>,
) {
    let calls = Arc::new(AtomicU32::new(0));
    let n = calls.clone();
    let svc = service_fn(move |req: String| {
        let i = n.fetch_add(1, Ordering::SeqCst) as usize;
        let (status, after) = answers[i.min(answers.len() - 1)];
        let mut b = http::Response::builder().status(status);
        if let Some(a) = after {
            b = b.header("retry-after", a);
        }
        let resp = b.body(format!("{req} #{i}")).unwrap();
        async move { Ok::<_, Infallible>(resp) }
    });
    (svc, calls)
}

#[test]
fn the_layer_retries_a_503_after_its_retry_after_and_attaches_the_report() {
    let (engine, clock) = engine(&policy("", "max_attempts = 3"));
    let (svc, calls) = client(&[(503, Some("1")), (200, None)]);
    let svc = PipelineLayer::new(engine.clone(), |_: &String| {
        CallSpec::new("t").idempotency_key("k")
    })
    .layer(svc);
    let mut fut = task::spawn(svc.oneshot("req".to_string()));
    assert!(fut.poll().is_pending());
    clock.advance(Duration::from_secs(1));
    let resp = match fut.poll() {
        Poll::Ready(r) => r.unwrap(),
        Poll::Pending => panic!("pending"),
    };
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.body(), "req #1");
    let report = resp.extensions().get::<RunReport>().unwrap();
    assert_eq!(report.reason, None);
    assert_eq!(report.attempts.len(), 2);
    assert_eq!(report.attempts[0].delay, Some(Duration::from_secs(1)));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[test]
fn a_terminal_response_is_handed_back_and_a_first_rejection_is_an_error() {
    let (engine, _clock) = engine("[tools.t]\nrate = \"1/h\"\nidempotent = true\n[tools.t.retry]");
    let (svc, calls) = client(&[(404, None), (200, None)]);
    let svc = PipelineLayer::new(engine, |_: &String| CallSpec::new("t")).layer(svc);
    let resp = match task::spawn(svc.clone().oneshot("a".to_string())).poll() {
        Poll::Ready(r) => r.unwrap(),
        Poll::Pending => panic!("pending"),
    };
    assert_eq!(resp.status(), 404);
    let report = resp.extensions().get::<RunReport>().unwrap();
    assert_eq!(report.reason, Some(StopReason::TerminalStatus));
    let err = match task::spawn(svc.oneshot("b".to_string())).poll() {
        Poll::Ready(r) => r.unwrap_err(),
        Poll::Pending => panic!("pending"),
    };
    assert!(err.downcast_ref::<Rejection>().is_some(), "{err}");
    assert!(err.downcast_ref::<RunFailure<tower::BoxError>>().is_none());
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the rejected call never reached the service"
    );
}
