//! A fake upstream MCP server on loopback (rmcp's Streamable HTTP server, served by
//! axum) and a client connected to a [`Gateway`] over an in-memory pipe.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, SubscriptionFilter,
    Tool,
};
use rmcp::service::{RequestContext, RunningService, SubscriptionContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleClient, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Value};
use toolgate::{Engine, Policy, Priority, Reason};
use toolgate_mcp::{Decisions, Gateway, McpConfig, Upstreams};

/// The fake upstream: `ok` (structured `{"n": 1}`), `fail` (`isError`), `bad` (breaks
/// its `outputSchema`), `slow` (ten seconds), `odd.name`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fake {
    pub(crate) calls: Arc<AtomicUsize>,
    pub(crate) cancelled: Arc<AtomicUsize>,
    /// Set by `grow`: the tool list then has `extra` too.
    pub(crate) grown: Arc<tokio::sync::watch::Sender<bool>>,
}

fn tool(name: &str, output: Option<Value>) -> Tool {
    let mut t: Tool = serde_json::from_value(json!({
        "name": name, "description": format!("the {name} tool"),
        "inputSchema": {"type": "object"},
    }))
    .expect("tool");
    t.output_schema = output.and_then(|o| o.as_object().cloned()).map(Arc::new);
    t
}

fn schema() -> Value {
    json!({"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]})
}

impl ServerHandler for Fake {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = vec![
            tool("ok", Some(schema())),
            tool("fail", None),
            tool("bad", Some(schema())),
            tool("slow", None),
            tool("odd.name", None),
            tool("grow", None),
        ];
        if *self.grown.borrow() {
            tools.push(tool("extra", None));
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut grown = self.grown.subscribe();
        tokio::select! {
            () = context.cancelled() => return Ok(()),
            _ = grown.wait_for(|g| *g) => {}
        }
        let _ = context.sink().notify_tool_list_changed().await;
        context.cancelled().await;
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let result = match &*request.name {
            "ok" | "odd.name" => CallToolResult::structured(json!({"n": 1})),
            "bad" => CallToolResult::structured(json!({"n": "not a number"})),
            "grow" => {
                self.grown.send_replace(true);
                // A handshake-era client hears of it unasked; a 2026-07-28 one on
                // its listen stream (below).
                let _ = context.peer.notify_tool_list_changed().await;
                CallToolResult::success(vec![ContentBlock::text("grown")])
            }
            "slow" => {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(10)) => {}
                    () = context.ct.cancelled() => {
                        self.cancelled.fetch_add(1, Ordering::SeqCst);
                    }
                }
                CallToolResult::success(vec![ContentBlock::text("slow done")])
            }
            _ => CallToolResult::error(vec![ContentBlock::text("boom")]),
        };
        Ok(CallToolResponse::Complete(result))
    }
}

/// Serves `fake` at `http://127.0.0.1:PORT/mcp`; returns the URL.
pub(crate) async fn serve_upstream(fake: Fake) -> String {
    let service = StreamableHttpService::new(
        move || Ok(fake.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().route_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/mcp")
}

/// The test's client: counts the tool-list changes it hears of.
#[derive(Debug, Clone, Default)]
pub(crate) struct Listener {
    pub(crate) changes: Arc<tokio::sync::Notify>,
}

impl rmcp::ClientHandler for Listener {
    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<RoleClient>) {
        self.changes.notify_one();
    }
}

/// Every decision the gateway told of, as `admitted TOOL TENANT` or `rejected TOOL
/// TENANT REASON`.
#[derive(Debug, Default)]
pub(crate) struct Recorded(pub(crate) std::sync::Mutex<Vec<String>>);

impl Decisions for Recorded {
    fn admitted(&self, tool: &str, tenant: Option<&str>, _: Duration, _: Priority) {
        let line = format!("admitted {tool} {}", tenant.unwrap_or("-"));
        self.0.lock().expect("lock").push(line);
    }

    fn rejected(&self, tool: &str, tenant: Option<&str>, reason: Reason) {
        let line = format!("rejected {tool} {} {reason}", tenant.unwrap_or("-"));
        self.0.lock().expect("lock").push(line);
    }
}

/// The gateway's parts for one test.
pub(crate) struct Setup {
    pub(crate) decisions: Arc<Recorded>,
    pub(crate) fake: Fake,
    pub(crate) engine: Engine,
    pub(crate) upstreams: Upstreams,
    pub(crate) client: RunningService<RoleClient, Listener>,
    pub(crate) listener: Listener,
}

/// A fake upstream, a gateway in front of it with `policy` and `mcp` (extra `[mcp]`
/// keys; its `fake` object, extra keys of `[mcp.servers.fake]`), and a client
/// connected to the gateway.
pub(crate) async fn setup(policy: &str, mcp: Value) -> Setup {
    setup_as(policy, mcp, None).await
}

/// As [`setup`], with `tenant` as the tenant of every call.
pub(crate) async fn setup_as(policy: &str, mcp: Value, tenant: Option<&str>) -> Setup {
    let fake = Fake::default();
    let url = serve_upstream(fake.clone()).await;
    let mut table = mcp;
    let mut server = json!({"url": url});
    if let Some(extra) = table.as_object_mut().and_then(|t| t.remove("fake")) {
        for (k, v) in extra.as_object().into_iter().flatten() {
            server[k] = v.clone();
        }
    }
    table["servers"] = json!({ "fake": server });
    let mut errors = Vec::new();
    let config = McpConfig::parse(&table, &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    let upstreams = Upstreams::start(config);
    assert!(
        upstreams.ready(Duration::from_secs(10)).await,
        "{:?}",
        upstreams.view()
    );
    let engine = Engine::new(Policy::from_toml_str(policy).expect("policy"));
    let decisions = Arc::new(Recorded::default());
    let gateway = Gateway::new(engine.clone(), upstreams.clone())
        .with_tenant(tenant.map(str::to_string))
        .with_decisions(decisions.clone());
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        if let Ok(running) = gateway.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let listener = Listener::default();
    let client = listener.clone().serve(client_io).await.expect("client");
    Setup {
        decisions,
        fake,
        engine,
        upstreams,
        client,
        listener,
    }
}

impl Setup {
    /// Calls the tool exposed as `name`.
    pub(crate) async fn call(
        &self,
        name: &str,
    ) -> Result<CallToolResult, rmcp::service::ServiceError> {
        self.call_with(name, json!({})).await
    }

    /// Calls the tool exposed as `name` with these arguments.
    pub(crate) async fn call_with(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<CallToolResult, rmcp::service::ServiceError> {
        let mut params = CallToolRequestParams::new(name.to_string());
        params.arguments = arguments.as_object().cloned();
        self.client.peer().call_tool(params).await
    }

    /// Calls that reached the upstream.
    pub(crate) fn upstream_calls(&self) -> usize {
        self.fake.calls.load(Ordering::SeqCst)
    }

    /// The state of the tool with this policy key.
    pub(crate) fn state(&self, key: &str) -> toolgate::ToolState {
        self.engine
            .tool_state(key, None)
            .expect("a tool with a policy")
    }
}

/// The text of a result's first content block.
pub(crate) fn text(r: &CallToolResult) -> String {
    serde_json::to_value(r).expect("json")["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}
