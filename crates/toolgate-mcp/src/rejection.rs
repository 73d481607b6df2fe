//! A rejected `tools/call` as MCP answers it: a tool result a model can act on, or a
//! JSON-RPC error carrying the same data ([`OnReject`]).
//!
//! The tool result (default):
//!
//! ```json
//! {"content": [{"type": "text", "text": "everything__echo is rate limited (tools.\"mcp:everything/echo\".rate); retry after 2.5 s"}],
//!  "structuredContent": {"tool": "everything__echo", "quota": "tools.\"mcp:everything/echo\".rate",
//!                        "reason": "rate_limited", "retry_after_ms": 2500},
//!  "isError": true}
//! ```
//!
//! With `on_reject = "jsonrpc_error"`: `{"code": -32000, "message": <the same text>,
//! "data": <the same object>}`.

use rmcp::model::{CallToolResult, ContentBlock, ErrorCode, ErrorData};
use serde_json::{json, Value};
use toolgate::{Reason, Rejection};

use crate::config::OnReject;

/// The JSON-RPC error code of a rejection (implementation-defined server error).
pub const REJECTED_CODE: i32 = -32000;

/// The answer to a rejected call of the tool exposed as `tool`.
///
/// # Errors
///
/// The JSON-RPC error, with `on_reject = "jsonrpc_error"`.
pub fn answer(tool: &str, r: &Rejection, on_reject: OnReject) -> Result<CallToolResult, ErrorData> {
    let text = text(tool, r);
    let data = data(tool, r);
    match on_reject {
        OnReject::JsonRpcError => Err(ErrorData::new(ErrorCode(REJECTED_CODE), text, Some(data))),
        _ => {
            let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
            result.structured_content = Some(data);
            Ok(result)
        }
    }
}

/// `{"tool", "quota", "reason", "retry_after_ms"}` (`retry_after_ms` rounded up, or
/// `null` when no retry time is known).
pub fn data(tool: &str, r: &Rejection) -> Value {
    json!({
        "tool": tool,
        "quota": r.quota(),
        "reason": r.reason().as_str(),
        "retry_after_ms": r.retry_after().map(|d| d.as_nanos().div_ceil(1_000_000)),
    })
}

/// The sentence a model reads, e.g. `lookup_customer is rate limited
/// (tools.lookup_customer.rate); retry after 2.5 s`.
pub fn text(tool: &str, r: &Rejection) -> String {
    let what = match r.reason() {
        Reason::RateLimited => "is rate limited",
        Reason::TokensLimited => "is over its token budget",
        Reason::ConcurrencyLimited => "has too many calls in flight",
        Reason::MaxWaitExceeded => "would have to wait longer than its max_wait",
        Reason::QueueFull => "has too many calls waiting",
        Reason::CostExceedsCapacity => "was asked for more than its quota can ever hold",
        Reason::CircuitOpen => "is paused after repeated failures (circuit open)",
        Reason::UnknownTool => "has no policy, and tools without one are denied",
        _ => "was not admitted",
    };
    let next = match (r.reason(), r.retry_after()) {
        (Reason::CostExceedsCapacity | Reason::UnknownTool, _) => "do not retry".to_string(),
        (_, Some(d)) => format!(
            "retry after {} s",
            seconds(d.as_nanos().div_ceil(1_000_000))
        ),
        (_, None) => "retry later".to_string(),
    };
    format!("{tool} {what} ({}); {next}", r.quota())
}

/// Milliseconds as seconds with at most three decimals and no trailing zeros.
fn seconds(ms: u128) -> String {
    let (s, frac) = (ms / 1000, ms % 1000);
    if frac == 0 {
        return s.to_string();
    }
    let f = format!("{frac:03}");
    format!("{s}.{}", f.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limited() -> Rejection {
        Rejection::new(
            "lookup_customer",
            "tools.lookup_customer.rate",
            Reason::RateLimited,
            Some(Duration::from_millis(2500)),
        )
    }

    #[test]
    fn a_rejection_is_a_tool_result_a_model_can_act_on() {
        let r = answer("lookup_customer", &limited(), OnReject::ToolResult).expect("result");
        assert_eq!(r.is_error, Some(true));
        let v = serde_json::to_value(&r).expect("json");
        assert_eq!(
            v["content"][0]["text"],
            "lookup_customer is rate limited (tools.lookup_customer.rate); retry after 2.5 s"
        );
        assert_eq!(
            v["structuredContent"],
            json!({"tool": "lookup_customer", "quota": "tools.lookup_customer.rate",
                   "reason": "rate_limited", "retry_after_ms": 2500})
        );
    }

    #[test]
    fn or_a_json_rpc_error_with_the_same_data() {
        let e = answer("lookup_customer", &limited(), OnReject::JsonRpcError).expect_err("error");
        assert_eq!(e.code.0, REJECTED_CODE);
        assert_eq!(e.data, Some(data("lookup_customer", &limited())));
        assert!(e.message.starts_with("lookup_customer is rate limited"));
    }

    #[test]
    fn seconds_are_short() {
        assert_eq!(seconds(2500), "2.5");
        assert_eq!(seconds(1000), "1");
        assert_eq!(seconds(50), "0.05");
        assert_eq!(seconds(1), "0.001");
        let never = Rejection::new("t", "tools.t.rate", Reason::CostExceedsCapacity, None);
        assert_eq!(
            text("t", &never),
            "t was asked for more than its quota can ever hold (tools.t.rate); do not retry"
        );
    }
}
