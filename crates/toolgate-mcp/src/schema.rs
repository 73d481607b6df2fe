//! How a value's violations of a JSON Schema are told: each with the JSON pointer of
//! the part that breaks it, at most [`MAX_VIOLATIONS`] (a large result with many
//! errors must not make an error message of any size). Used for MCP tools'
//! `outputSchema` here and for the HTTP `invoke`'s `arguments_schema` and
//! `result_schema` in the gateway.

use serde_json::Value;

/// The most violations one message names.
pub const MAX_VIOLATIONS: usize = 8;

/// The violations of `value` against `v`, each as `"/pointer: message"` (`"/"` for
/// the whole value); empty when it conforms.
pub fn violations(v: &jsonschema::Validator, value: &Value) -> Vec<String> {
    v.iter_errors(value)
        .take(MAX_VIOLATIONS)
        .map(|e| {
            let at = e.instance_path.to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            format!("{at}: {e}")
        })
        .collect()
}
