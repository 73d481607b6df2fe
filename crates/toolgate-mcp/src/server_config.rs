//! One upstream MCP server, `[mcp.servers.NAME]`: a child process spoken to over
//! stdio (`command`, `args`, `env`) or a Streamable HTTP endpoint (`url`, `headers`),
//! which of its tools are exposed (`tools`, `exclude`), and where a call's token
//! estimate is read from its arguments (`cost`).

use std::collections::BTreeMap;

use serde_json::Value;

/// How toolgate reaches an upstream server.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// A child process toolgate starts, restarts and stops, spoken to over stdio.
    Stdio {
        /// The program (looked up on `PATH` when it has no `/`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to the environment toolgate runs in.
        env: BTreeMap<String, String>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The endpoint, `http://…` or `https://…`.
        url: String,
        /// Headers sent with every request (such as `Authorization`).
        headers: BTreeMap<String, String>,
    },
}

/// One upstream server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerConfig {
    /// How it is reached.
    pub transport: Transport,
    /// Only these tools are exposed (all when `None`).
    pub tools: Option<Vec<String>>,
    /// These tools are never exposed.
    pub exclude: Vec<String>,
    /// By upstream tool name: the JSON pointer (RFC 6901) of the number in a call's
    /// arguments that is its token estimate, charged to the tool's `tokens` budgets.
    pub cost: BTreeMap<String, String>,
}

/// The keys a server table accepts.
const KEYS: &str = "args, command, cost, env, exclude, headers, tools, url";
/// The most arguments, variables, headers or names in one list.
const MAX_LIST: usize = 1024;
/// The longest string of a server table (a URL, an argument, a header value).
const MAX_STRING: usize = 8192;

// === impl Transport ===

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values and environment values may hold secrets: names only.
        match self {
            Self::Stdio { command, args, env } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &env.keys().collect::<Vec<_>>())
                .finish(),
            Self::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

// === impl ServerConfig ===

impl ServerConfig {
    /// Whether the upstream tool `name` passes the `tools`/`exclude` filters.
    pub fn exposes(&self, name: &str) -> bool {
        let listed = self
            .tools
            .as_ref()
            .is_none_or(|t| t.iter().any(|n| n == name));
        listed && !self.exclude.iter().any(|n| n == name)
    }

    /// Parses the table at `path`; problems go to `errors`, and then `None`.
    pub(crate) fn parse(path: &str, v: &Value, errors: &mut Vec<String>) -> Option<Self> {
        let Some(table) = v.as_object() else {
            errors.push(format!("{path}: expected a table, got {v}"));
            return None;
        };
        let before = errors.len();
        let mut parts = Parts::default();
        for (key, v) in table {
            let r = match key.as_str() {
                "command" => string(v).map(|s| parts.command = Some(s)),
                "args" => strings(v).map(|a| parts.args = Some(a)),
                "env" => map(v).map(|m| parts.env = Some(m)),
                "url" => string(v).and_then(|u| url(&u)).map(|u| parts.url = Some(u)),
                "headers" => map(v)
                    .and_then(|m| headers(&m).map(|()| m))
                    .map(|m| parts.headers = Some(m)),
                "tools" => strings(v).map(|t| parts.tools = Some(t)),
                "exclude" => strings(v).map(|t| parts.exclude = t),
                "cost" => map(v)
                    .and_then(|m| pointers(&m).map(|()| m))
                    .map(|m| parts.cost = m),
                _ => Err(format!("unknown key (expected one of: {KEYS})")),
            };
            if let Err(e) = r {
                errors.push(format!("{path}.{key}: {e}"));
            }
        }
        let named = table.contains_key("command") || table.contains_key("url");
        let transport = parts.transport(path, named, errors);
        if errors.len() != before {
            return None;
        }
        Some(Self {
            transport: transport?,
            tools: parts.tools,
            exclude: parts.exclude,
            cost: parts.cost,
        })
    }
}

/// The keys of a server table as read, before they are checked together.
#[derive(Default)]
struct Parts {
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    url: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    tools: Option<Vec<String>>,
    exclude: Vec<String>,
    cost: BTreeMap<String, String>,
}

impl Parts {
    /// `command` (+ `args`, `env`) or `url` (+ `headers`), never both. `named`: the
    /// table has one of them (an invalid one is reported already, not as missing).
    fn transport(
        &mut self,
        path: &str,
        named: bool,
        errors: &mut Vec<String>,
    ) -> Option<Transport> {
        match (self.command.take(), self.url.take()) {
            (Some(_), Some(_)) => {
                errors.push(format!(
                    "{path}: give either command (a stdio server) or url (a Streamable HTTP \
                     server), not both"
                ));
                None
            }
            (None, None) if named => None,
            (None, None) => {
                errors.push(format!(
                    "{path}: missing command (a stdio server) or url (a Streamable HTTP server)"
                ));
                None
            }
            (Some(command), None) => {
                if self.headers.is_some() {
                    errors.push(format!("{path}.headers: only for a url server"));
                }
                if command.is_empty() {
                    errors.push(format!("{path}.command: must not be empty"));
                }
                Some(Transport::Stdio {
                    command,
                    args: self.args.take().unwrap_or_default(),
                    env: self.env.take().unwrap_or_default(),
                })
            }
            (None, Some(url)) => {
                for key in [("args", self.args.is_some()), ("env", self.env.is_some())] {
                    if key.1 {
                        errors.push(format!("{path}.{}: only for a command server", key.0));
                    }
                }
                Some(Transport::Http {
                    url,
                    headers: self.headers.take().unwrap_or_default(),
                })
            }
        }
    }
}

fn string(v: &Value) -> Result<String, String> {
    let s = v
        .as_str()
        .ok_or_else(|| format!("expected a string, got {v}"))?;
    if s.len() > MAX_STRING {
        return Err(format!("{} bytes: at most {MAX_STRING}", s.len()));
    }
    Ok(s.to_string())
}

fn strings(v: &Value) -> Result<Vec<String>, String> {
    let list = v
        .as_array()
        .ok_or_else(|| format!("expected an array of strings, got {v}"))?;
    if list.len() > MAX_LIST {
        return Err(format!("{} entries: at most {MAX_LIST}", list.len()));
    }
    list.iter().map(string).collect()
}

fn map(v: &Value) -> Result<BTreeMap<String, String>, String> {
    let table = v
        .as_object()
        .ok_or_else(|| format!("expected a table of strings, got {v}"))?;
    if table.len() > MAX_LIST {
        return Err(format!("{} entries: at most {MAX_LIST}", table.len()));
    }
    table
        .iter()
        .map(|(k, v)| {
            string(v)
                .map(|s| (k.clone(), s))
                .map_err(|e| format!("{k}: {e}"))
        })
        .collect()
}

fn url(u: &str) -> Result<String, String> {
    let rest = u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"));
    match rest {
        Some(r) if !r.is_empty() && u.parse::<http::Uri>().is_ok() => Ok(u.to_string()),
        _ => Err(format!("{u:?}: expected an http:// or https:// URL")),
    }
}

/// Every cost must be a JSON pointer to a place in the arguments.
fn pointers(m: &BTreeMap<String, String>) -> Result<(), String> {
    match m.iter().find(|(_, p)| !p.starts_with('/')) {
        Some((tool, p)) => Err(format!(
            "{tool}: {p:?}: expected a JSON pointer such as \"/max_tokens\""
        )),
        None => Ok(()),
    }
}

/// Every header must be one HTTP can carry (the message names the header, never its
/// value).
fn headers(m: &BTreeMap<String, String>) -> Result<(), String> {
    for (k, v) in m {
        http::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| format!("{k:?}: not a header name"))?;
        http::HeaderValue::from_str(v).map_err(|_| format!("{k}: not a valid header value"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<ServerConfig, Vec<String>> {
        let mut errors = Vec::new();
        ServerConfig::parse("mcp.servers.x", &v, &mut errors).ok_or(errors)
    }

    #[test]
    fn a_stdio_and_an_http_server_parse() {
        let s = parse(json!({"command": "npx", "args": ["a"], "env": {"K": "v"},
                             "exclude": ["b"]}))
        .expect("valid");
        assert!(matches!(&s.transport, Transport::Stdio { command, .. } if command == "npx"));
        assert!(s.exposes("a") && !s.exposes("b"));
        let h = parse(
            json!({"url": "http://127.0.0.1:9/mcp", "headers": {"X-K": "s3cret"},
                             "tools": ["only"]}),
        )
        .expect("valid");
        assert!(h.exposes("only") && !h.exposes("other"));
        assert!(!format!("{h:?}").contains("s3cret"), "{h:?}");
    }

    #[test]
    fn errors_name_their_path() {
        let e = parse(json!({"command": 1, "bogus": true})).expect_err("invalid");
        assert!(
            e.contains(&"mcp.servers.x.command: expected a string, got 1".to_string()),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|l| l.starts_with("mcp.servers.x.bogus: unknown key")),
            "{e:?}"
        );
        let e = parse(json!({"command": "a", "url": "http://h/"})).expect_err("both");
        assert!(e[0].contains("not both"), "{e:?}");
        let e = parse(json!({})).expect_err("neither");
        assert!(e[0].starts_with("mcp.servers.x: missing command"), "{e:?}");
        let e = parse(json!({"url": "ftp://h"})).expect_err("scheme");
        assert_eq!(
            e,
            ["mcp.servers.x.url: \"ftp://h\": expected an http:// or https:// URL"]
        );
        let e = parse(json!({"url": "http://h/", "args": ["a"]})).expect_err("args");
        assert_eq!(e, ["mcp.servers.x.args: only for a command server"]);
        let e = parse(json!({"url": "http://h/", "headers": {"X": "a\nb"}})).expect_err("hdr");
        assert_eq!(e, ["mcp.servers.x.headers: X: not a valid header value"]);
        let e = parse(json!({"url": "http://h/", "cost": {"t": "max_tokens"}})).expect_err("ptr");
        assert_eq!(
            e,
            ["mcp.servers.x.cost: t: \"max_tokens\": expected a JSON pointer such as \"/max_tokens\""]
        );
    }
}
