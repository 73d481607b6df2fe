//! One upstream MCP server, `[mcp.servers.NAME]`: a child process spoken to over
//! stdio (`command`, `args`, `env`) or a Streamable HTTP endpoint (`url`, `headers`,
//! and for `https://` a `ca_file` of its own CAs),
//! which of its tools are exposed (`tools`, `exclude`), and where a call's token
//! estimate is read from its arguments (`cost`).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::tls::CaFile;

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
        /// The only CAs an `https://` server's certificate is verified against; the
        /// system's roots when `None`.
        ca_file: Option<CaFile>,
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
const KEYS: &str = "args, ca_file, command, cost, env, exclude, headers, tools, url";
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
            Self::Http {
                url,
                headers,
                ca_file,
            } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .field("ca_file", ca_file)
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
                "ca_file" => string(v)
                    .and_then(|p| CaFile::read(&p))
                    .map(|c| parts.ca_file = Some(c)),
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
    ca_file: Option<CaFile>,
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
                for key in [
                    ("headers", self.headers.is_some()),
                    ("ca_file", self.ca_file.is_some()),
                ] {
                    if key.1 {
                        errors.push(format!("{path}.{}: only for a url server", key.0));
                    }
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
                if self.ca_file.is_some() && !url.starts_with("https://") {
                    errors.push(format!("{path}.ca_file: only for an https:// url"));
                }
                Some(Transport::Http {
                    url,
                    headers: self.headers.take().unwrap_or_default(),
                    ca_file: self.ca_file.take(),
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

    /// A CA certificate whose key was thrown away: only read, never used to sign.
    const TEST_CA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/test-ca.pem");

    #[test]
    fn an_https_server_reads_its_ca_file_when_the_config_is_read() {
        let s = parse(json!({"url": "https://127.0.0.1:9/mcp", "ca_file": TEST_CA})).expect("ok");
        let Transport::Http { ca_file, .. } = &s.transport else {
            panic!("{s:?}")
        };
        let ca = ca_file.as_ref().expect("a ca_file");
        assert_eq!((ca.path(), ca.len()), (TEST_CA, 1));
        let s = parse(json!({"url": "https://127.0.0.1:9/mcp"})).expect("ok");
        assert!(matches!(
            &s.transport,
            Transport::Http { ca_file: None, .. }
        ));
    }

    #[test]
    fn a_ca_file_is_refused_where_it_cannot_apply() {
        let e = parse(json!({"url": "http://h/", "ca_file": TEST_CA})).expect_err("http");
        assert_eq!(e, ["mcp.servers.x.ca_file: only for an https:// url"]);
        let e = parse(json!({"command": "a", "ca_file": TEST_CA})).expect_err("stdio");
        assert_eq!(e, ["mcp.servers.x.ca_file: only for a url server"]);
        let e = parse(json!({"url": "https://h/", "ca_file": "/nonexistent/ca.pem"}))
            .expect_err("missing");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("mcp.servers.x.ca_file: \"/nonexistent/ca.pem\": cannot read it: "),
            "{e:?}"
        );
        let e = parse(json!({"url": "https://h/", "ca_file": 7})).expect_err("type");
        assert_eq!(e, ["mcp.servers.x.ca_file: expected a string, got 7"]);
    }
}
