//! `tools/call` through toolgate versus the same client calling the same upstream
//! directly, in one run (run by `scripts/bench-mcp`, not a test).
//!
//! The upstream is an rmcp Streamable HTTP server in this process with one trivial tool
//! (`echo`, text back); toolgate is the `toolgate serve` binary given as the first
//! argument, with `[mcp.servers.up]` pointing at the upstream and a policy on the tool
//! (so every call is admitted with accounting and completed). The clients are rmcp
//! Streamable HTTP clients, the same code for both targets. Rounds alternate direct and
//! toolgate, so load from elsewhere on the machine hits both alike; the median round of
//! each is reported.
//!
//! Usage: `bench_mcp TOOLGATE_BIN [SECONDS_PER_ROUND] [CLIENTS] [ROUNDS]`

#![allow(clippy::disallowed_methods, reason = "a benchmark measures real time")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark fails loudly"
)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{
    StreamableHttpClientTransport, StreamableHttpServerConfig, StreamableHttpService,
};
use rmcp::{RoleServer, ServerHandler, ServiceExt};

/// The upstream: one trivial tool.
#[derive(Debug, Clone)]
struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool: Tool = serde_json::from_value(serde_json::json!({
            "name": "echo", "description": "echoes", "inputSchema": {"type": "object"},
        }))
        .expect("tool");
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text("ok"),
        ])))
    }
}

/// What one round measured.
#[derive(Debug, Clone, Copy, Default)]
struct Round {
    per_second: f64,
    p50_us: f64,
    p99_us: f64,
}

async fn upstream() -> String {
    let service = StreamableHttpService::new(
        || Ok(Echo),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().route_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/mcp")
}

/// Starts `toolgate serve` in front of `upstream`; returns the child and its `/mcp`.
fn toolgate(bin: &str, upstream: &str, dir: &std::path::Path) -> (std::process::Child, String) {
    let config = dir.join("bench-mcp.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp.servers.up]\nurl = \"{upstream}\"\n\n[tools.\"mcp:up/echo\"]\n\
             rate = \"1000000/s\"\n"
        ),
    )
    .unwrap();
    let mut child = Command::new(bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("toolgate");
    let out = BufReader::new(child.stdout.take().unwrap());
    for line in out.lines() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("mcp: ") {
            let url = rest.split_whitespace().next().unwrap().to_string();
            return (child, url);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("toolgate did not start");
}

/// `clients` clients calling `echo` (named `tool` there) for `secs` seconds.
async fn round(url: &str, tool: &str, clients: usize, secs: f64) -> Round {
    let mut tasks = Vec::new();
    let until = Instant::now() + Duration::from_secs_f64(secs);
    for _ in 0..clients {
        let (url, tool) = (url.to_string(), tool.to_string());
        tasks.push(tokio::spawn(async move {
            let client = ().serve(StreamableHttpClientTransport::from_uri(url)).await.unwrap();
            let mut lat = Vec::new();
            while Instant::now() < until {
                let t0 = Instant::now();
                let r = client
                    .peer()
                    .call_tool(CallToolRequestParams::new(tool.clone()))
                    .await
                    .unwrap();
                assert_ne!(r.is_error, Some(true), "{r:?}");
                lat.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            let _ = client.cancel().await;
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_by(f64::total_cmp);
    let at = |q: f64| all[((all.len() as f64 - 1.0) * q) as usize];
    Round {
        per_second: all.len() as f64 / secs,
        p50_us: at(0.5),
        p99_us: at(0.99),
    }
}

/// The median of each figure over the rounds (the upper median of an even count),
/// and its spread (lowest, highest).
fn median(rounds: &[Round]) -> (Round, [(f64, f64); 3]) {
    let mid = |f: fn(&Round) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], (v[0], v[v.len() - 1]))
    };
    let (per_second, s0) = mid(|r| r.per_second);
    let (p50_us, s1) = mid(|r| r.p50_us);
    let (p99_us, s2) = mid(|r| r.p99_us);
    let m = Round {
        per_second,
        p50_us,
        p99_us,
    };
    (m, [s0, s1, s2])
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    toolgate_mcp::tls::install_provider();
    let args: Vec<String> = std::env::args().collect();
    let bin = args
        .get(1)
        .expect("usage: bench_mcp TOOLGATE_BIN [SECS] [CLIENTS] [ROUNDS]");
    let secs: f64 = args.get(2).map_or(5.0, |s| s.parse().unwrap());
    let clients: usize = args.get(3).map_or(16, |s| s.parse().unwrap());
    let rounds: usize = args.get(4).map_or(5, |s| s.parse().unwrap());
    let dir = std::env::temp_dir().join(format!("bench-mcp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let up = upstream().await;
    let (mut child, gate) = toolgate(bin, &up, &dir);
    let mut results: [Vec<Round>; 4] = Default::default();
    for _ in 0..rounds {
        // Throughput with `clients` clients; latency with one client (no queueing).
        results[0].push(round(&up, "echo", clients, secs).await);
        results[1].push(round(&gate, "up__echo", clients, secs).await);
        results[2].push(round(&up, "echo", 1, secs / 2.0).await);
        results[3].push(round(&gate, "up__echo", 1, secs / 2.0).await);
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let [direct, through, direct1, through1] = results.map(|r| median(&r));
    println!("| path | tools/call per s ({clients} clients) | p50 (1 client) | p99 (1 client) |");
    println!("|---|---|---|---|");
    for (name, (t, ts), (l, ls)) in [
        ("direct", direct, direct1),
        ("through toolgate", through, through1),
    ] {
        println!(
            "| {name} | {:.0} ({:.0}–{:.0}) | {:.0} µs ({:.0}–{:.0}) | {:.0} µs ({:.0}–{:.0}) |",
            t.per_second, ts[0].0, ts[0].1, l.p50_us, ls[1].0, ls[1].1, l.p99_us, ls[2].0, ls[2].1
        );
    }
    println!(
        "\nthroughput ratio {:.2}×, added p50 {:.0} µs (medians of {rounds} interleaved rounds of \
         {secs} s; the spread in brackets)",
        through.0.per_second / direct.0.per_second,
        through1.0.p50_us - direct1.0.p50_us
    );
}
