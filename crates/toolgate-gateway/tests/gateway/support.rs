//! A gateway on 127.0.0.1:0, a JSON client, and polling helpers.

use std::future::Future;
use std::time::{Duration, Instant};

use serde_json::Value;
use toolgate_gateway::state::{AppState, Source};
use toolgate_gateway::store::Store;

/// A gateway serving on an ephemeral loopback port.
pub struct Server {
    pub base: String,
    pub state: AppState,
    pub http: reqwest::Client,
}

/// Starts a gateway on a TOML config.
pub async fn start(toml: &str) -> Server {
    start_on(AppState::from_toml(toml).expect("valid config")).await
}

/// Starts a gateway whose config is read from (and reloaded from) a file.
pub async fn start_file(path: &std::path::Path) -> Server {
    let source = Source::File(path.to_path_buf());
    let loaded = source.load().expect("valid config");
    toolgate_gateway::metrics::install();
    let engine = Store::Memory
        .engine(loaded.policy.clone())
        .await
        .expect("engine");
    start_on(AppState::new(source, loaded, engine).expect("state")).await
}

pub async fn start_on(state: AppState) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = toolgate_gateway::app::router(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server {
        base: format!("http://{addr}"),
        state,
        http: reqwest::Client::new(),
    }
}

/// A response: status, headers and JSON body (`Null` when empty).
#[derive(Debug)]
pub struct Res {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Server {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn post(&self, path: &str, body: Value) -> Res {
        self.send(self.http.post(self.url(path)).json(&body)).await
    }

    pub async fn post_as(&self, token: &str, path: &str, body: Value) -> Res {
        self.send(
            self.http
                .post(self.url(path))
                .bearer_auth(token)
                .json(&body),
        )
        .await
    }

    pub async fn get(&self, path: &str) -> Res {
        self.send(self.http.get(self.url(path))).await
    }

    pub async fn send(&self, req: reqwest::RequestBuilder) -> Res {
        let res = req.send().await.expect("request");
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let bytes = res.bytes().await.expect("body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))
        };
        Res {
            status,
            headers,
            body,
        }
    }

    pub async fn admit(&self, tool: &str) -> Res {
        self.post("/v1/admit", serde_json::json!({ "tool": tool }))
            .await
    }

    /// The live state of a tool, read from the engine.
    pub fn tool(&self, tool: &str) -> toolgate::ToolState {
        self.state
            .engine()
            .tool_state(tool, None)
            .expect("tool has a policy")
    }
}

/// Polls `check` every 5 ms until it holds, failing after `limit`.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A generous bound for "eventually".
pub const SOON: Duration = Duration::from_secs(10);
