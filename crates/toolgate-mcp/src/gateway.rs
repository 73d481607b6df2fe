//! toolgate as an MCP server: `tools/list` answers the aggregated catalog and
//! `tools/call` runs through admission (`Engine::run`). Nothing else is admitted:
//! `initialize`, `ping` and `tools/list` never touch a quota, and resources and
//! prompts are not offered.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, Implementation, ListToolsResult,
    PaginatedRequestParams, ResultType, ServerCapabilities, ServerConfig, SubscriptionFilter,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{RoleServer, ServerHandler};
use tokio::sync::watch;
use toolgate::Engine;

use std::sync::Arc;

use crate::call::{self, Job};
use crate::decisions::Decisions;
use crate::upstreams::Upstreams;

/// How often a session's list-change listener checks that the session is still open.
const SESSION_CHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// The tenant of a request on `/mcp`, put into the HTTP request's extensions by the
/// gateway's authentication (`None`: auth is off).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub Option<String>);

/// The MCP server in front of the upstreams, cheap to clone (one per session).
#[derive(Debug, Clone)]
pub struct Gateway {
    engine: Engine,
    upstreams: Upstreams,
    /// The tenant of calls that bring none (stdio, or HTTP without auth).
    tenant: Option<String>,
    /// Told of every decision, when set.
    decisions: Option<Arc<dyn Decisions>>,
}

// === impl Gateway ===

impl Gateway {
    /// Serves `upstreams`' tools, admitting calls on `engine`.
    pub fn new(engine: Engine, upstreams: Upstreams) -> Self {
        Self {
            engine,
            upstreams,
            tenant: None,
            decisions: None,
        }
    }

    /// Tells `decisions` of every admission decision of a `tools/call`.
    #[must_use]
    pub fn with_decisions(mut self, decisions: Arc<dyn Decisions>) -> Self {
        self.decisions = Some(decisions);
        self
    }

    /// The tenant of calls whose transport names none (`toolgate mcp`).
    #[must_use]
    pub fn with_tenant(mut self, tenant: Option<String>) -> Self {
        self.tenant = tenant;
        self
    }

    /// The upstreams.
    pub fn upstreams(&self) -> &Upstreams {
        &self.upstreams
    }

    /// The call's tenant: the one the HTTP layer authenticated, else the default.
    fn tenant_of(&self, ctx: &RequestContext<RoleServer>) -> Option<String> {
        ctx.extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<Tenant>())
            .map_or_else(|| self.tenant.clone(), |t| t.0.clone())
    }
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("toolgate", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "toolgate admits every tools/call under the tool's quotas; a rejected call is a \
             result with isError: true that says when to retry.",
        )
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // A session of a handshake-era client hears of every change of the tool list.
        let mut changes = self.upstreams.changes();
        let peer = context.peer;
        tokio::spawn(async move {
            let mut seen = *changes.borrow_and_update();
            let mut tick = tokio::time::interval(SESSION_CHECK);
            loop {
                tokio::select! {
                    changed = next_change(&mut changes, &mut seen) => {
                        if !changed || peer.notify_tool_list_changed().await.is_err() {
                            return;
                        }
                    }
                    _ = tick.tick() => {
                        if peer.is_transport_closed() {
                            return;
                        }
                    }
                }
            }
        });
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        // A 2026-07-28 client hears of changes on its `subscriptions/listen` stream.
        let mut changes = self.upstreams.changes();
        let mut seen = *changes.borrow_and_update();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                changed = next_change(&mut changes, &mut seen) => {
                    if !changed || context.sink().notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let catalog = self.upstreams.catalog();
        let tools = catalog.tools().iter().map(|e| e.tool.clone()).collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let config = self.upstreams.config();
        let entry = self
            .upstreams
            .catalog()
            .get(&request.name)
            .cloned()
            .ok_or_else(|| {
                ErrorData::invalid_params(format!("unknown tool {:?}", request.name), None)
            })?;
        let size = request.arguments.as_ref().map_or(0, json_size);
        if size > config.max_argument_bytes {
            return Err(ErrorData::invalid_params(
                format!(
                    "the arguments of {} are {size} bytes: at most {} (mcp.max_argument_bytes)",
                    request.name, config.max_argument_bytes
                ),
                None,
            ));
        }
        let tenant = self.tenant_of(&context);
        let progress = context
            .meta
            .get_progress_token()
            .map(|t| (context.peer.clone(), t));
        let job = Job {
            engine: &self.engine,
            upstreams: &self.upstreams,
            config,
            entry,
            tenant: tenant.as_deref(),
            arguments: request.arguments,
            progress,
            decisions: self.decisions.as_deref(),
        };
        tokio::select! {
            r = call::run(job) => r.map(|mut result| {
                // An upstream on an older protocol sends no `resultType`; a client on
                // 2026-07-28 requires it (rmcp drops it again for older clients).
                result.result_type.get_or_insert(ResultType::COMPLETE);
                CallToolResponse::Complete(result)
            }),
            // Dropping the call: a waiting one leaves no trace, a running one is
            // cancelled upstream.
            () = context.ct.cancelled() => Err(ErrorData::new(
                rmcp::model::ErrorCode::INTERNAL_ERROR,
                "the call was cancelled",
                None,
            )),
        }
    }
}

/// Waits for the next change of the catalog's version past `seen`; `false` when the
/// upstreams are gone.
async fn next_change(changes: &mut watch::Receiver<u64>, seen: &mut u64) -> bool {
    loop {
        if changes.changed().await.is_err() {
            return false;
        }
        let now = *changes.borrow_and_update();
        if now != *seen {
            *seen = now;
            return true;
        }
    }
}

/// The length of `v` as JSON, without building the text.
fn json_size(v: &rmcp::model::JsonObject) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    match serde_json::to_writer(&mut c, v) {
        Ok(()) => c.0,
        Err(_) => usize::MAX,
    }
}
