//! How an upstream tool is named: its policy key and the name clients see.
//!
//! The tool `T` of the server `S` is limited by `[tools."mcp:S/T"]` (its **policy
//! key**, `T` exactly as the upstream names it) and exposed to MCP clients as
//! `S__T` (its **exposed name**), where:
//!
//! - `S` is the server's name from the config: ASCII letters, digits, `_` and `-`,
//!   starting with a letter or digit, not ending with `_`, without `__`, at most
//!   [`MAX_SERVER_NAME`] bytes (a config error otherwise), so the first `__` of an
//!   exposed name always ends the server's part;
//! - every character of `T` that is not an ASCII letter, digit, `_` or `-` becomes
//!   `_` (`search.issues` → `search_issues`), as the strictest common clients accept
//!   only `^[a-zA-Z0-9_-]{1,64}$`;
//! - an exposed name longer than [`MAX_EXPOSED_NAME`] bytes is refused: that tool is
//!   left out, with a warning;
//! - two tools of one server that come out the same (`a.b` and `a_b`) collide: the
//!   first in the upstream's list keeps the name, the later ones are left out, with a
//!   warning naming both.

/// The longest server name, in bytes.
pub const MAX_SERVER_NAME: usize = 32;
/// The longest exposed name, in bytes.
pub const MAX_EXPOSED_NAME: usize = 64;
/// The longest upstream tool name taken in, in bytes (the MCP limit).
pub const MAX_UPSTREAM_NAME: usize = 128;

/// The separator of the server's and the tool's part of an exposed name.
pub const SEPARATOR: &str = "__";

/// Checks a server name from the config.
///
/// # Errors
///
/// When the name breaks the rule above; the message says which part.
pub fn check_server_name(name: &str) -> Result<(), String> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if name.is_empty() || name.len() > MAX_SERVER_NAME {
        return Err(format!(
            "the server name must be 1 to {MAX_SERVER_NAME} bytes"
        ));
    }
    if !ok_chars || !name.as_bytes()[0].is_ascii_alphanumeric() {
        return Err(
            "the server name must be ASCII letters, digits, `_` and `-`, starting with a \
             letter or digit"
                .into(),
        );
    }
    if name.contains(SEPARATOR) || name.ends_with('_') {
        return Err(
            "the server name must not contain `__` nor end with `_` (exposed names are \
             SERVER__TOOL)"
                .into(),
        );
    }
    Ok(())
}

/// The policy key of `tool` of `server`: `mcp:server/tool`.
pub fn policy_key(server: &str, tool: &str) -> String {
    format!("mcp:{server}/{tool}")
}

/// The exposed name of `tool` of `server` (a checked server name).
///
/// # Errors
///
/// When the tool's name is empty or longer than [`MAX_UPSTREAM_NAME`], or the exposed
/// name would be longer than [`MAX_EXPOSED_NAME`].
pub fn exposed_name(server: &str, tool: &str) -> Result<String, String> {
    if tool.is_empty() || tool.len() > MAX_UPSTREAM_NAME {
        return Err(format!(
            "the tool name must be 1 to {MAX_UPSTREAM_NAME} bytes"
        ));
    }
    let mut out = String::with_capacity(server.len() + SEPARATOR.len() + tool.len());
    out.push_str(server);
    out.push_str(SEPARATOR);
    out.extend(tool.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            c
        } else {
            '_'
        }
    }));
    if out.len() > MAX_EXPOSED_NAME {
        return Err(format!(
            "the exposed name {out:?} is longer than {MAX_EXPOSED_NAME} bytes"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposed_names_follow_the_documented_rule() {
        assert_eq!(
            exposed_name("github", "search_issues").as_deref(),
            Ok("github__search_issues")
        );
        assert_eq!(
            exposed_name("everything", "get-sum").as_deref(),
            Ok("everything__get-sum")
        );
        assert_eq!(
            exposed_name("fs", "read.file/ü").as_deref(),
            Ok("fs__read_file__")
        );
        assert!(exposed_name("s", &"x".repeat(62)).is_err());
        assert!(exposed_name("s", &"x".repeat(61)).is_ok());
        assert!(exposed_name("s", "").is_err());
        assert_eq!(
            policy_key("github", "search.issues"),
            "mcp:github/search.issues"
        );
    }

    #[test]
    fn server_names_keep_the_separator_unambiguous() {
        for ok in ["github", "a-b", "a_b", "x1"] {
            assert_eq!(check_server_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "a__b", "a_", "_a", "-a", "a.b", "a/b", &"x".repeat(33)] {
            assert!(check_server_name(bad).is_err(), "{bad}");
        }
    }
}
