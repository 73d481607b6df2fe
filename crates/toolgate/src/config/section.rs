//! Reading one table of a config with path-aware, collect-everything error reporting.
//!
//! Why not `#[serde(deny_unknown_fields)]` alone: serde stops at the first problem,
//! while a config author wants every problem at once, each with its path. A `Section`
//! reads the keys it is asked for, records an error for every bad value, and at
//! [`Section::finish`] reports each key nobody asked for.

use serde_json::{Map, Value};

use super::ConfigError;

pub(super) struct Section<'a, 'e> {
    path: String,
    map: &'a Map<String, Value>,
    known: Vec<&'static str>,
    errors: &'e mut Vec<ConfigError>,
}

/// A value type that can be read from a config value.
pub(super) trait FromValue: Sized {
    fn from_value(v: &Value) -> Result<Self, String>;
}

impl<'a, 'e> Section<'a, 'e> {
    /// Opens `value` as a table at `path`, or records that it is not one.
    pub(super) fn open(
        path: impl Into<String>,
        value: &'a Value,
        errors: &'e mut Vec<ConfigError>,
    ) -> Option<Self> {
        let path = path.into();
        match value {
            Value::Object(map) => Some(Self {
                path,
                map,
                known: Vec::new(),
                errors,
            }),
            other => {
                errors.push(ConfigError::new(
                    path,
                    format!("expected a table, got {}", kind(other)),
                ));
                None
            }
        }
    }

    pub(super) fn child_path(&self, key: &str) -> String {
        join(&self.path, key)
    }

    pub(super) fn errors(&mut self) -> &mut Vec<ConfigError> {
        self.errors
    }

    /// Reads `key`, recording an error if it is present but invalid.
    pub(super) fn get<T: FromValue>(&mut self, key: &'static str) -> Option<T> {
        self.get_with(key, T::from_value)
    }

    pub(super) fn get_with<T>(
        &mut self,
        key: &'static str,
        parse: impl FnOnce(&Value) -> Result<T, String>,
    ) -> Option<T> {
        let v = self.raw(key)?;
        match parse(v) {
            Ok(t) => Some(t),
            Err(msg) => {
                let path = join(&self.path, key);
                self.errors.push(ConfigError::new(path, msg));
                None
            }
        }
    }

    /// The raw value of `key`, marking it known.
    pub(super) fn raw(&mut self, key: &'static str) -> Option<&'a Value> {
        self.known.push(key);
        self.map.get(key)
    }

    /// Records an error at `key`.
    pub(super) fn error(&mut self, key: &str, msg: impl Into<String>) {
        let path = join(&self.path, key);
        self.errors.push(ConfigError::new(path, msg));
    }

    /// Reports every key that was never asked for.
    pub(super) fn finish(self) {
        for key in self.map.keys() {
            if !self.known.contains(&key.as_str()) {
                let mut expected = self.known.clone();
                expected.sort_unstable();
                expected.dedup();
                self.errors.push(ConfigError::new(
                    join(&self.path, key),
                    format!("unknown key (expected one of: {})", expected.join(", ")),
                ));
            }
        }
    }
}

pub(super) fn join(path: &str, key: &str) -> String {
    let simple = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    match (path.is_empty(), simple) {
        (true, true) => key.to_string(),
        (true, false) => format!("{key:?}"),
        (false, true) => format!("{path}.{key}"),
        (false, false) => format!("{path}.{key:?}"),
    }
}

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a decimal number",
        Value::Number(_) => "a whole number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "a table",
    }
}

pub(super) fn expect_str(v: &Value) -> Result<&str, String> {
    v.as_str()
        .ok_or_else(|| format!("expected a string, got {}", kind(v)))
}

/// A whole number in `min..=max`. A decimal number with no fractional part (`2.0`,
/// as JSON writers and Python dicts often spell a count) counts as whole.
pub(super) fn int_in(v: &Value, min: u64, max: u64) -> Result<u64, String> {
    let n = match v {
        Value::Number(n) => n.as_u64().or_else(|| whole(n)).ok_or_else(|| {
            if n.as_i64().is_some() || n.as_f64().is_some_and(|f| f < 0.0) {
                format!("{n}: must be at least {min}")
            } else if n.as_f64().is_some_and(|f| f > max as f64) {
                format!("{n}: must be at most {max}")
            } else {
                format!("{n}: expected a whole number")
            }
        })?,
        other => return Err(format!("expected a whole number, got {}", kind(other))),
    };
    if n < min {
        return Err(format!("{n}: must be at least {min}"));
    }
    if n > max {
        return Err(format!("{n}: must be at most {max}"));
    }
    Ok(n)
}

/// A decimal number that is a whole number exactly representable as a `u64`.
fn whole(n: &serde_json::Number) -> Option<u64> {
    let f = n.as_f64()?;
    // 2^64 as f64 is exact; every f64 below it with no fractional part converts exactly.
    (f.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&f)).then_some(f as u64)
}

/// A finite number in `[min, max]` (integers are accepted).
pub(super) fn float_in(v: &Value, min: f64, max: f64) -> Result<f64, String> {
    let f = v
        .as_f64()
        .ok_or_else(|| format!("expected a number, got {}", kind(v)))?;
    if !f.is_finite() || f < min || f > max {
        return Err(format!("{f}: must be between {min} and {max}"));
    }
    Ok(f)
}

/// A fraction in (0, 1].
pub(super) fn fraction(v: &Value) -> Result<f64, String> {
    let f = v
        .as_f64()
        .ok_or_else(|| format!("expected a number, got {}", kind(v)))?;
    if !(f > 0.0 && f <= 1.0) {
        return Err(format!("{f}: must be greater than 0 and at most 1"));
    }
    Ok(f)
}

/// One of the given words.
pub(super) fn one_of<T: Copy>(v: &Value, options: &[(&str, T)]) -> Result<T, String> {
    let s = expect_str(v)?;
    options
        .iter()
        .find(|(name, _)| *name == s)
        .map(|(_, t)| *t)
        .ok_or_else(|| {
            let names: Vec<String> = options.iter().map(|(n, _)| format!("{n:?}")).collect();
            format!("{s:?}: expected one of {}", names.join(", "))
        })
}

impl FromValue for bool {
    fn from_value(v: &Value) -> Result<Self, String> {
        v.as_bool()
            .ok_or_else(|| format!("expected true or false, got {}", kind(v)))
    }
}

impl FromValue for String {
    fn from_value(v: &Value) -> Result<Self, String> {
        expect_str(v).map(str::to_string)
    }
}

impl FromValue for std::time::Duration {
    fn from_value(v: &Value) -> Result<Self, String> {
        crate::vocab::parse_duration(expect_str(v)?)
    }
}

impl FromValue for Vec<String> {
    fn from_value(v: &Value) -> Result<Self, String> {
        let items = v
            .as_array()
            .ok_or_else(|| format!("expected an array of strings, got {}", kind(v)))?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("item {i}: expected a string, got {}", kind(item)))
            })
            .collect()
    }
}
