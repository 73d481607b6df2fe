//! Subjects: where a tool's calls, results and dead letters are published.
//!
//! A NATS subject token cannot hold `.`, `*`, `>` or white space, while tool names
//! can (`mcp:github/search_issues`, `openapi:crm/getCustomer`). A token made only of
//! `[A-Za-z0-9_-]` is used as it is; any other is *encoded*: every byte outside that
//! set — `%` included — is written `%XX` (two upper-case hex digits). So an encoded
//! token contains `%` exactly when it was encoded, decoding is percent-decoding, and
//! two names never share a token.
//!
//! ```
//! use toolgate_mesh::subject::{decode, encode};
//!
//! assert_eq!(encode("lookup_customer"), "lookup_customer");
//! assert_eq!(encode("mcp:github/search_issues"), "mcp%3Agithub%2Fsearch_issues");
//! assert_eq!(decode("mcp%3Agithub%2Fsearch_issues").as_deref(), Some("mcp:github/search_issues"));
//! assert_eq!(decode("100%25").as_deref(), Some("100%"));
//! ```

/// The prefix of call subjects: `toolgate.calls.<tool>`.
pub const CALLS: &str = "toolgate.calls";
/// The prefix of result subjects: `toolgate.results.<call_id>`.
pub const RESULTS: &str = "toolgate.results";
/// The prefix of dead-letter subjects: `toolgate.dlq.<tool>`.
pub const DLQ: &str = "toolgate.dlq";
/// The dead-letter token of a call whose tool is unknown or unreadable.
pub const UNKNOWN_TOOL_TOKEN: &str = "_";

fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// The subject token of `name` (a tool name or a call id).
pub fn encode(name: &str) -> String {
    if !name.is_empty() && name.bytes().all(plain) {
        return name.to_string();
    }
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(name.len() * 3);
    for b in name.bytes() {
        if plain(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
    out
}

/// The name a token stands for; `None` when it is not a token [`encode`] makes
/// (an escape that is not two hex digits, a byte that should have been escaped, or
/// bytes that are not UTF-8).
pub fn decode(token: &str) -> Option<String> {
    let bytes = token.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = token.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b if plain(b) => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    let name = String::from_utf8(out).ok()?;
    (encode(&name) == token).then_some(name)
}

/// `toolgate.calls.<tool>`.
pub fn calls(tool: &str) -> String {
    format!("{CALLS}.{}", encode(tool))
}

/// `toolgate.results.<call_id>`.
pub fn results(call_id: &str) -> String {
    format!("{RESULTS}.{}", encode(call_id))
}

/// `toolgate.dlq.<tool>`, or `toolgate.dlq._` when the tool is not known.
pub fn dlq(tool: Option<&str>) -> String {
    match tool {
        Some(t) if !t.is_empty() => format!("{DLQ}.{}", encode(t)),
        _ => format!("{DLQ}.{UNKNOWN_TOOL_TOKEN}"),
    }
}

/// The tool a call subject names: `None` for a subject that is not
/// `toolgate.calls.<one token>` or whose token does not decode.
pub fn tool_of(subject: &str) -> Option<String> {
    let token = subject.strip_prefix(CALLS)?.strip_prefix('.')?;
    if token.contains('.') {
        return None;
    }
    decode(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips_and_plain_names_stay_as_they_are() {
        let names = [
            "lookup_customer",
            "a-b_C9",
            "mcp:github/search_issues",
            "openapi:crm/getCustomer",
            "with space",
            "dots.in.name",
            "wild*card>",
            "100%",
            "%41",
            "ünïcödé",
            "",
        ];
        for n in names {
            let t = encode(n);
            assert!(
                !t.is_empty() || n.is_empty(),
                "{n:?} must have a non-empty token"
            );
            assert!(
                t.bytes().all(|b| plain(b) || b == b'%'),
                "{n:?} → {t:?} is not subject-safe"
            );
            if !n.is_empty() {
                assert_eq!(decode(&t).as_deref(), Some(n), "{n:?} → {t:?}");
            }
        }
        assert_eq!(encode("%41"), "%2541", "a literal % is escaped itself");
    }

    #[test]
    fn tokens_encode_would_not_make_are_refused() {
        for t in ["%4", "%zz", "a.b", "%41", "a b", "%C3"] {
            assert_eq!(decode(t), None, "{t:?}");
        }
    }

    #[test]
    fn subjects_name_the_tool_and_refuse_deeper_ones() {
        assert_eq!(calls("mcp:s/t"), "toolgate.calls.mcp%3As%2Ft");
        assert_eq!(
            tool_of("toolgate.calls.mcp%3As%2Ft").as_deref(),
            Some("mcp:s/t")
        );
        assert_eq!(tool_of("toolgate.calls.a.b"), None);
        assert_eq!(tool_of("toolgate.callsx"), None);
        assert_eq!(dlq(None), "toolgate.dlq._");
        assert_eq!(dlq(Some("t")), "toolgate.dlq.t");
        assert_eq!(results("c-1"), "toolgate.results.c-1");
    }
}
