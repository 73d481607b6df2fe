//! Integration tests of the admission engine, on a manual clock.

#![allow(clippy::unwrap_used)]

mod adaptive;
mod circuit;
mod compile;
mod config;
mod deadline;
mod debt;
mod demo;
mod fairness;
mod pauses;
mod quotas;
mod reload;
mod retry;
mod scoped;
mod shaping;
mod store;
mod support;
mod wait;

#[test]
fn admission_futures_are_send_and_static_with_owned_inputs() {
    fn assert_send<T: Send + 'static>(_: T) {}
    let (engine, _clock) = support::engine("[tools.t]\nrate = \"1/s\"");
    let tool = String::from("t");
    assert_send(async move { engine.admit(&toolgate::Call::new(&tool)).await.map(drop) });
}
