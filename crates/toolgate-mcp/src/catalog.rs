//! The aggregated tool list: every upstream's tools that pass its filters, under
//! their exposed names ([`crate::naming`]), at most `max_tools` of them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rmcp::model::Tool;
use serde_json::Value;

use crate::naming;
use crate::server_config::ServerConfig;

/// One exposed tool.
#[derive(Debug)]
pub struct Entry {
    /// The upstream server's name.
    pub server: Arc<str>,
    /// The tool's name at the upstream.
    pub upstream_name: String,
    /// `mcp:SERVER/TOOL`, the key of its policy.
    pub policy_key: String,
    /// The tool as clients see it (its exposed name, the upstream's description,
    /// schemas and annotations).
    pub tool: Tool,
    /// Where a call's token estimate is in its arguments (`[mcp.servers.S] cost`).
    pub cost: Option<String>,
    /// `toolgate_mcp_upstream_calls_total{server, tool}`: calls that reached the
    /// upstream.
    pub upstream_calls: metrics::Counter,
    /// The compiled `outputSchema`, when the tool declares one.
    output: Option<jsonschema::Validator>,
}

/// The tools exposed now.
#[derive(Debug, Default)]
pub struct Catalog {
    by_name: HashMap<String, Arc<Entry>>,
    /// Sorted by exposed name, for `tools/list`.
    list: Vec<Arc<Entry>>,
}

// === impl Entry ===

impl Entry {
    /// The token estimate of a call with `arguments`: the whole number at the tool's
    /// cost pointer (0 without one, or when the arguments have none there).
    ///
    /// # Errors
    ///
    /// When the value there is not a whole number from 0 to 2^53 - 1.
    pub fn tokens(
        &self,
        arguments: Option<&serde_json::Map<String, Value>>,
    ) -> Result<u64, String> {
        let (Some(p), Some(args)) = (&self.cost, arguments) else {
            return Ok(0);
        };
        match Value::Object(args.clone()).pointer(p) {
            None => Ok(0),
            Some(v) => v.as_u64().filter(|n| *n < 1 << 53).ok_or_else(|| {
                format!("the token estimate at {p} is {v}: expected a whole number")
            }),
        }
    }

    /// Checks a result's `structuredContent` against the tool's `outputSchema`.
    ///
    /// # Errors
    ///
    /// Every violation, with its JSON pointer; a tool with an `outputSchema` that
    /// returns no `structuredContent` is one too (the MCP specification requires it).
    pub fn check_output(&self, structured: Option<&Value>) -> Result<(), String> {
        let Some(v) = &self.output else {
            return Ok(());
        };
        let Some(value) = structured else {
            return Err(
                "the result has no structuredContent, but the tool declares an \
                        outputSchema"
                    .into(),
            );
        };
        let errors = crate::schema::violations(v, value);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "the structuredContent does not match the tool's outputSchema: {}",
                errors.join("; ")
            ))
        }
    }
}

// === impl Catalog ===

impl Catalog {
    /// Builds the catalog from each server's tool list (in the upstream's order).
    /// Returns it with a warning for every tool left out.
    pub fn build(
        tools: &BTreeMap<String, Vec<Tool>>,
        servers: &BTreeMap<String, ServerConfig>,
        max_tools: usize,
    ) -> (Self, Vec<String>) {
        let mut c = Self::default();
        let mut warnings = Vec::new();
        for (server, list) in tools {
            let Some(config) = servers.get(server) else {
                continue;
            };
            let server: Arc<str> = Arc::from(server.as_str());
            for tool in list.iter().filter(|t| config.exposes(&t.name)) {
                if c.list.len() >= max_tools {
                    warnings.push(format!(
                        "mcp.servers.{server}: tool {:?} left out: more than max_tools = \
                         {max_tools} tools in all",
                        tool.name
                    ));
                    continue;
                }
                match entry(&server, tool, config) {
                    Ok(e) => c.insert(e, &mut warnings),
                    Err(why) => warnings.push(format!(
                        "mcp.servers.{server}: tool {:?} left out: {why}",
                        tool.name
                    )),
                }
            }
        }
        c.list.sort_by(|a, b| a.tool.name.cmp(&b.tool.name));
        (c, warnings)
    }

    fn insert(&mut self, e: Entry, warnings: &mut Vec<String>) {
        let name = e.tool.name.to_string();
        if let Some(first) = self.by_name.get(&name) {
            warnings.push(format!(
                "mcp.servers.{}: tool {:?} left out: its exposed name {name:?} is taken by \
                 tool {:?}",
                e.server, e.upstream_name, first.upstream_name
            ));
            return;
        }
        let e = Arc::new(e);
        self.by_name.insert(name, e.clone());
        self.list.push(e);
    }

    /// The tool exposed as `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Entry>> {
        self.by_name.get(name)
    }

    /// Every exposed tool, sorted by exposed name.
    pub fn tools(&self) -> &[Arc<Entry>] {
        &self.list
    }

    /// How many tools are exposed.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether no tool is exposed.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

fn entry(server: &Arc<str>, tool: &Tool, config: &ServerConfig) -> Result<Entry, String> {
    let exposed = naming::exposed_name(server, &tool.name)?;
    let output = match &tool.output_schema {
        Some(s) => Some(
            jsonschema::validator_for(&Value::Object((**s).clone()))
                .map_err(|e| format!("its outputSchema is not a valid JSON Schema: {e}"))?,
        ),
        None => None,
    };
    let mut exposed_tool = tool.clone();
    exposed_tool.name = exposed.into();
    Ok(Entry {
        server: server.clone(),
        upstream_name: tool.name.to_string(),
        policy_key: naming::policy_key(server, &tool.name),
        cost: config.cost.get(&*tool.name).cloned(),
        upstream_calls: metrics::counter!(
            "toolgate_mcp_upstream_calls_total",
            "server" => server.to_string(),
            "tool" => naming::policy_key(server, &tool.name),
        ),
        tool: exposed_tool,
        output,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, output: Option<Value>) -> Tool {
        let mut t: Tool = serde_json::from_value(json!({
            "name": name, "description": "d", "inputSchema": {"type": "object"}
        }))
        .expect("tool");
        t.output_schema = output.and_then(|o| o.as_object().cloned()).map(Arc::new);
        t
    }

    fn servers(v: Value) -> BTreeMap<String, ServerConfig> {
        let mut errors = Vec::new();
        let c = crate::McpConfig::parse(&json!({ "servers": v }), &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        c.servers
    }

    #[test]
    fn tools_are_filtered_named_and_collisions_refused() {
        let servers = servers(json!({
            "a": {"command": "x", "exclude": ["hidden"]},
            "b": {"url": "http://h/", "tools": ["t", "t.x", "t_x"]},
        }));
        let mut tools = BTreeMap::new();
        tools.insert("a".into(), vec![tool("t", None), tool("hidden", None)]);
        tools.insert(
            "b".into(),
            vec![
                tool("t", None),
                tool("t.x", None),
                tool("t_x", None),
                tool("u", None),
            ],
        );
        let (c, warnings) = Catalog::build(&tools, &servers, 100);
        let names: Vec<&str> = c.tools().iter().map(|e| &*e.tool.name).collect();
        assert_eq!(names, ["a__t", "b__t", "b__t_x"]);
        let e = c.get("b__t_x").expect("b__t_x");
        assert_eq!(
            (e.upstream_name.as_str(), e.policy_key.as_str()),
            ("t.x", "mcp:b/t.x")
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0]
                .contains("\"t_x\" left out: its exposed name \"b__t_x\" is taken by tool \"t.x\""),
            "{warnings:?}"
        );
    }

    #[test]
    fn max_tools_bounds_the_catalog() {
        let servers = servers(json!({"a": {"command": "x"}}));
        let mut tools = BTreeMap::new();
        tools.insert(
            "a".into(),
            (0..5).map(|i| tool(&format!("t{i}"), None)).collect(),
        );
        let (c, warnings) = Catalog::build(&tools, &servers, 3);
        assert_eq!(c.len(), 3);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
    }

    #[test]
    fn output_is_checked_against_the_output_schema() {
        let servers = servers(json!({"a": {"command": "x"}}));
        let schema = json!({"type": "object", "properties": {"n": {"type": "number"}},
                            "required": ["n"]});
        let mut tools = BTreeMap::new();
        tools.insert("a".into(), vec![tool("t", Some(schema))]);
        let (c, _) = Catalog::build(&tools, &servers, 10);
        let e = c.get("a__t").expect("a__t");
        assert_eq!(e.check_output(Some(&json!({"n": 1}))), Ok(()));
        let err = e
            .check_output(Some(&json!({"n": "x"})))
            .expect_err("invalid");
        assert!(err.contains("/n"), "{err}");
        assert!(e.check_output(None).is_err());
    }
}
