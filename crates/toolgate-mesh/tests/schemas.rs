//! The JSON Schemas in `docs/mesh/` say what the code does: every call the schema
//! accepts is read, every one it refuses is refused, and the results and dead
//! letters the mesh writes validate.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use toolgate_mesh::envelope::{Attempt, DeadLetter, ErrorBody, MeshCall, MeshResult};

fn schema(name: &str) -> jsonschema::Validator {
    let path = format!("{}/../../docs/mesh/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("schema file");
    let v: Value = serde_json::from_str(&text).expect("schema is JSON");
    jsonschema::validator_for(&v).expect("a valid schema")
}

#[test]
fn the_call_schema_and_the_reader_agree() {
    let s = schema("call.schema.json");
    let good = [
        json!({"call_id": "c", "tool": "t", "arguments": {}}),
        json!({"call_id": "c", "tool": "mcp:s/t", "tenant": "a", "arguments": {"x": [1]},
               "idempotency_key": "k", "deadline": "2030-01-01T00:00:00Z",
               "cost": {"tokens": 5}, "reply_to": "_INBOX.a.b"}),
        json!({"call_id": "c", "tool": "t", "arguments": {}, "deadline": 1_700_000_000_000u64}),
    ];
    let bad = [
        json!({"call_id": "c", "tool": "t"}),
        json!({"call_id": "c", "tool": "t", "arguments": []}),
        json!({"call_id": "", "tool": "t", "arguments": {}}),
        json!({"call_id": "c", "tool": "t", "arguments": {}, "idempotencyKey": "k"}),
        json!({"call_id": "c", "tool": "t", "arguments": {}, "deadline": -5}),
        json!({"call_id": "c", "tool": "t", "arguments": {}, "cost": {"tokens": 9_007_199_254_740_992u64}}),
        json!({"call_id": "c", "tool": "t", "arguments": {}, "reply_to": "a.>"}),
        json!({"call_id": "x".repeat(129), "tool": "t", "arguments": {}}),
    ];
    for v in good {
        assert!(s.is_valid(&v), "schema refuses {v}");
        assert!(
            MeshCall::parse(v.to_string().as_bytes()).is_ok(),
            "reader refuses {v}"
        );
    }
    for v in bad {
        assert!(!s.is_valid(&v), "schema accepts {v}");
        assert!(
            MeshCall::parse(v.to_string().as_bytes()).is_err(),
            "reader accepts {v}"
        );
    }
}

#[test]
fn results_and_dead_letters_validate() {
    let mut ok = MeshResult::new("c".into(), "t".into(), "success");
    ok.result = Some(json!({"a": 1}));
    ok.status = Some(200);
    ok.attempts = vec![Attempt {
        attempt: 1,
        outcome: "success".into(),
        status: Some(200),
        latency_ms: 12,
    }];
    ok.admitted_at = Some(ok.finished_at.clone());
    let failed = MeshResult::failed(
        "c".into(),
        "t".into(),
        "deadline_exceeded",
        ErrorBody::new("deadline_exceeded", "late".into()),
    );
    let results = schema("result.schema.json");
    for r in [&ok, &failed] {
        let v = serde_json::to_value(r).unwrap();
        assert!(results.is_valid(&v), "{v}");
    }
    let letter = DeadLetter {
        reason: "max_deliver".into(),
        call_id: Some("c".into()),
        tool: Some("t".into()),
        message: "{}".into(),
        error: ErrorBody::new("upstream_error", "503".into()),
        attempts: ok.attempts.clone(),
        delivered: 5,
        at: failed.finished_at.clone(),
    };
    let v = serde_json::to_value(&letter).unwrap();
    assert!(schema("dead-letter.schema.json").is_valid(&v), "{v}");
}
