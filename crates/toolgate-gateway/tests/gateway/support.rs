//! A gateway on 127.0.0.1:0, a JSON client, and polling helpers.

use std::future::{pending, Future};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use toolgate_gateway::conn::{Cores, Limits};
use toolgate_gateway::state::{AppState, Source};
use toolgate_gateway::store::Store;

/// A gateway serving on an ephemeral loopback port.
pub struct Server {
    pub base: String,
    pub state: AppState,
    pub http: reqwest::Client,
    /// The runtimes that serve the connections, as `toolgate serve`'s on the Redis
    /// store; `None`: served on the test's runtime, as `toolgate serve` in memory.
    pub cores: Option<Arc<Cores>>,
}

/// How a test's gateway serves its connections: as `toolgate serve` does on the
/// Redis store (each on one of two runtimes of its own) or in memory (on the
/// process's worker pool, here the test's runtime).
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    Cores,
    Pool,
}

/// Both [`Shape`]s, for the tests of what each connection is held to.
pub const SHAPES: [Shape; 2] = [Shape::Cores, Shape::Pool];

/// `body` written to a config file in a directory of its own, named for the test
/// (`name`) and this process.
pub fn config_file(name: &str, body: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("toolgate-test-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("toolgate.toml");
    std::fs::write(&path, body).expect("config");
    path
}

/// Removes the directory [`config_file`] made for `path`.
pub fn remove_config(path: &std::path::Path) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Starts a gateway on a TOML config.
pub async fn start(toml: &str) -> Server {
    start_on(AppState::from_toml(toml).expect("valid config")).await
}

/// [`start`], serving its connections in the given shape (printed, so that a failing
/// test's output says which).
pub async fn start_shaped(toml: &str, shape: Shape) -> Server {
    println!("connections served as {shape:?}");
    let state = AppState::from_toml(toml).expect("valid config");
    start_on_shaped(state, shape).await
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

/// Serves `state` as `toolgate serve` does on the Redis store (the same accept loop,
/// with the limits of its `[gateway]` table, each connection on one of two runtimes
/// of its own), until the test's runtime ends. In memory `toolgate serve` serves
/// them on its worker pool instead, through the same function per connection
/// ([`start_shaped`] with [`Shape::Pool`]; the CLI tests run the binary so).
pub async fn start_on(state: AppState) -> Server {
    start_on_shaped(state, Shape::Cores).await
}

/// [`start_on`], serving the connections in the given shape.
pub async fn start_on_shaped(state: AppState, shape: Shape) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let limits = Limits::new(&state.live().settings);
    let cores = match shape {
        Shape::Cores => Some(Arc::new(
            Cores::start(2).expect("the connections' runtimes"),
        )),
        Shape::Pool => None,
    };
    let serving =
        toolgate_gateway::conn::serve_on(listener, state.clone(), limits, cores.clone(), pending());
    tokio::spawn(serving);
    Server {
        base: format!("http://{addr}"),
        state,
        http: reqwest::Client::new(),
        cores,
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

    pub async fn get_as(&self, token: &str, path: &str) -> Res {
        self.send(self.http.get(self.url(path)).bearer_auth(token))
            .await
    }

    pub async fn get(&self, path: &str) -> Res {
        self.send(self.http.get(self.url(path))).await
    }

    /// `DELETE /v1/reservations/{id}`, without auth.
    pub async fn release(&self, reservation: &str) -> Res {
        self.send(
            self.http
                .delete(self.url(&format!("/v1/reservations/{reservation}"))),
        )
        .await
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

/// The body of a GET of `url` as text (a metrics page).
pub async fn get_text(http: &reqwest::Client, url: &str) -> String {
    http.get(url)
        .send()
        .await
        .expect("request")
        .text()
        .await
        .expect("text")
}

/// A raw connection to `server`, for bytes reqwest cannot send (or holds back).
pub async fn connect(server: &Server) -> tokio::net::TcpStream {
    let addr = server.base.trim_start_matches("http://");
    tokio::net::TcpStream::connect(addr).await.expect("connect")
}

/// Reads `stream` until the server closes it, within `limit`: what was read and when
/// the close came (since the call), or `None` when it is still open after `limit`.
pub async fn read_until_closed(
    stream: &mut tokio::net::TcpStream,
    limit: Duration,
) -> Option<(Vec<u8>, Duration)> {
    use tokio::io::AsyncReadExt;
    let start = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let left = limit.checked_sub(start.elapsed())?;
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some((out, start.elapsed())),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// A response read off a raw connection.
#[derive(Debug)]
pub struct RawRes {
    pub status: u16,
    /// The head's header lines, names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl RawRes {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Splits `bytes` into HTTP/1.1 responses framed by `content-length`, each body JSON
/// (the test fails on any other).
pub fn responses(bytes: &[u8]) -> Vec<RawRes> {
    let mut text = String::from_utf8(bytes.to_vec()).expect("utf-8 answers");
    let mut out = Vec::new();
    while !text.is_empty() {
        let (head, rest) = text.split_once("\r\n\r\n").expect("a response head");
        let mut lines = head.split("\r\n");
        let status = lines.next().expect("status line")[9..12]
            .parse()
            .expect("status");
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map(|(_, v)| v.parse().expect("length"))
            .expect("content-length");
        let body = serde_json::from_str(&rest[..len])
            .unwrap_or_else(|e| panic!("not JSON ({e}): {head}\r\n\r\n{}", &rest[..len]));
        out.push(RawRes {
            status,
            headers,
            body,
        });
        text = rest[len..].to_string();
    }
    out
}

/// A `[[gateway.tokens]]` entry for `tenant`, whose token is `"{tenant}-secret"`.
pub fn token_table(tenant: &str, admin: bool) -> String {
    format!(
        "[[gateway.tokens]]\ntenant = \"{tenant}\"\nsha256 = \"{}\"\nadmin = {admin}\n",
        toolgate_gateway::auth::hash_token(&format!("{tenant}-secret"))
    )
}
