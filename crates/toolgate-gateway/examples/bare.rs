//! The benchmark baseline: a bare axum server answering every request with a constant
//! JSON body, as fast as axum goes on this machine. `scripts/bench-gateway` runs it
//! side by side with `toolgate serve`. Under `/body/…` the same handler first reads
//! the request's body (as `Bytes`), as every admission must.
//!
//! It runs on the allocator `toolgate` runs on (jemalloc), so that the comparison
//! measures the admission, not the allocator.
//!
//! Usage: `cargo run --release -p toolgate-gateway --example bare -- 127.0.0.1:8788`

use axum::body::Bytes;
use axum::routing::any;
use axum::{Json, Router};
use serde_json::{json, Value};

#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

async fn constant() -> Json<Value> {
    Json(json!({"admitted": true, "lease": "00000000000000010000000000000000", "waited_ms": 0}))
}

async fn constant_after_body(body: Bytes) -> Json<Value> {
    std::hint::black_box(body);
    constant().await
}

fn main() -> anyhow::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8788".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        println!("bare axum listening on http://{}", listener.local_addr()?);
        let app = Router::new()
            .route("/body/{*path}", any(constant_after_body))
            .route("/{*path}", any(constant));
        axum::serve(listener, app).await?;
        anyhow::Ok(())
    })
}
