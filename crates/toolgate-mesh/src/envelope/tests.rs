use super::*;
use serde_json::json;

fn parse(v: Value) -> Result<MeshCall, Unreadable> {
    MeshCall::parse(v.to_string().as_bytes())
}

#[test]
fn a_full_call_is_read() {
    let c = parse(json!({
        "call_id": "c1", "tool": "mcp:s/t", "tenant": "acme",
        "arguments": {"q": 1}, "idempotency_key": "k", "deadline": "2030-01-01T00:00:00Z",
        "cost": {"tokens": 12}, "reply_to": "_INBOX.x.y",
    }))
    .expect("valid");
    assert_eq!((c.call_id.as_str(), c.tool.as_str()), ("c1", "mcp:s/t"));
    assert_eq!(c.tokens, Some(12));
    assert_eq!(c.arguments["q"], 1);
    let ms = c.deadline.and_then(|d| d.duration_since(UNIX_EPOCH).ok());
    assert_eq!(ms, Some(Duration::from_secs(1_893_456_000)));
    let c = parse(json!({"call_id": "c", "tool": "t", "arguments": {}, "deadline": 1000}))
        .expect("valid");
    assert_eq!(c.deadline, Some(UNIX_EPOCH + Duration::from_secs(1)));
}

#[test]
fn what_is_wrong_is_named_and_what_is_readable_is_kept() {
    let cases = [
        (
            json!({"call_id": "c", "tool": "t", "arguments": []}),
            "arguments: expected a JSON object",
        ),
        (
            json!({"call_id": "c", "tool": "t", "arguments": {}, "idempotencyKey": "k"}),
            "unknown field `idempotencyKey`",
        ),
        (
            json!({"call_id": "c", "tool": "", "arguments": {}}),
            "tool: must not be empty",
        ),
        (
            json!({"call_id": "c", "tool": "t", "arguments": {}, "tenant": "x".repeat(257)}),
            "tenant: 257 bytes",
        ),
        (
            json!({"call_id": "c", "tool": "t", "arguments": {}, "deadline": "soon"}),
            "deadline: \"soon\" is not an RFC 3339",
        ),
        (
            json!({"call_id": "c", "tool": "t", "arguments": {}, "deadline": -1}),
            "deadline: -1 is not Unix",
        ),
        (
            json!({"call_id": "c", "tool": "t", "arguments": {}, "cost": {"tokens": MAX_TOKENS + 1}}),
            "cost.tokens: at most",
        ),
        (
            json!({"call_id": "c", "tool": "t", "arguments": {}, "reply_to": "a.*"}),
            "reply_to:",
        ),
    ];
    for (v, want) in cases {
        let e = parse(v.clone()).expect_err("invalid");
        assert!(e.message.contains(want), "{v}: {e:?}");
        assert_eq!(e.call_id.as_deref(), Some("c"), "{v}");
    }
    let e = MeshCall::parse(b"{not json").expect_err("invalid");
    assert_eq!(e.call_id, None);
    let e = parse(json!({"call_id": "x".repeat(129), "tool": "t", "arguments": {}}))
        .expect_err("too long");
    assert_eq!(e.call_id, None, "an over-long id names no result subject");
}

#[test]
fn time_left_is_zero_once_the_deadline_passed() {
    let c = parse(json!({"call_id": "c", "tool": "t", "arguments": {}, "deadline": 10_000}))
        .expect("valid");
    let at = |ms| UNIX_EPOCH + Duration::from_millis(ms);
    assert_eq!(c.time_left(at(4_000)), Some(Duration::from_secs(6)));
    assert_eq!(c.time_left(at(20_000)), Some(Duration::ZERO));
}
