//! Reading a core [`Call`]: its tenant, token estimate, count and `max_wait`.
//!
//! Why this module exists: the core's `Call` keeps those fields crate-private and has
//! no getters yet, and this crate must not change the core. So the fields are read
//! back from `Call`'s derived `Debug` text, and the result is *verified*: a `Call` is
//! rebuilt from the parsed values and must compare equal (`Call: PartialEq`) to the
//! original, so a parse can fail but never be silently wrong. Remove this module once
//! the core has getters (listed in the issue note).

use std::time::Duration;

use toolgate::Call;

/// The fields of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallInfo {
    pub(crate) tenant: Option<String>,
    pub(crate) tokens: u64,
    pub(crate) count: u64,
    pub(crate) max_wait: Option<Duration>,
}

// === impl CallInfo ===

impl CallInfo {
    /// Reads `call`'s fields; `None` if they cannot be read back exactly.
    pub(crate) fn read(call: &Call<'_>) -> Option<Self> {
        let text = format!("{call:?}");
        let mut p = Parser { s: &text };
        p.lit("Call { tool: ")?;
        let tool = p.string()?;
        p.lit(", tenant: ")?;
        let tenant = p.option(Parser::string)?;
        p.lit(", tokens: ")?;
        let tokens = p.int()?;
        p.lit(", count: ")?;
        let count = p.int()?;
        p.lit(", max_wait: ")?;
        let max_wait = p.option(Parser::duration)?;
        p.lit(" }")?;
        let info = Self {
            tenant,
            tokens,
            count,
            max_wait,
        };
        (tool == call.tool_name() && info.rebuild(call.tool_name()) == *call).then_some(info)
    }

    fn rebuild<'a>(&'a self, tool: &'a str) -> Call<'a> {
        let c = Call::new(tool)
            .with_tenant(self.tenant.as_deref())
            .tokens(self.tokens)
            .count(self.count);
        match self.max_wait {
            Some(d) => c.max_wait(d),
            None => c,
        }
    }
}

struct Parser<'s> {
    s: &'s str,
}

impl Parser<'_> {
    fn lit(&mut self, l: &str) -> Option<()> {
        self.s = self.s.strip_prefix(l)?;
        Some(())
    }

    fn option<T>(&mut self, f: fn(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.lit("None").is_some() {
            return Some(None);
        }
        self.lit("Some(")?;
        let v = f(self)?;
        self.lit(")")?;
        Some(Some(v))
    }

    fn int(&mut self) -> Option<u64> {
        let end = self.s.find(|c: char| !c.is_ascii_digit())?;
        let v = self.s[..end].parse().ok()?;
        self.s = &self.s[end..];
        Some(v)
    }

    /// A `Debug`-escaped string.
    fn string(&mut self) -> Option<String> {
        self.lit("\"")?;
        let mut out = String::new();
        let mut chars = self.s.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.s = &self.s[i + 1..];
                    return Some(out);
                }
                '\\' => match chars.next()?.1 {
                    'n' => out.push('\n'),
                    'r' => out.push('\r'),
                    't' => out.push('\t'),
                    '0' => out.push('\0'),
                    'u' => {
                        let rest = &self.s[i + 2..];
                        let close = rest.find('}')?;
                        let hex = rest.strip_prefix('{')?.get(..close - 1)?;
                        out.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
                        for _ in 0..=close {
                            chars.next();
                        }
                    }
                    other => out.push(other),
                },
                c => out.push(c),
            }
        }
        None
    }

    /// A `Duration` as `Debug` writes it: `1.5s`, `250ms`, `10µs`, `7ns`.
    fn duration(&mut self) -> Option<Duration> {
        let end = self.s.find(|c: char| !c.is_ascii_digit() && c != '.')?;
        let number = &self.s[..end];
        self.s = &self.s[end..];
        let unit_ns: u128 = if self.lit("ns").is_some() {
            1
        } else if self.lit("µs").is_some() {
            1_000
        } else if self.lit("ms").is_some() {
            1_000_000
        } else {
            self.lit("s")?;
            1_000_000_000
        };
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        let mut ns = whole.parse::<u128>().ok()? * unit_ns;
        let mut scale = unit_ns;
        for d in frac.chars() {
            scale /= 10;
            ns += u128::from(d.to_digit(10)?) * scale;
        }
        Some(Duration::from_nanos(u64::try_from(ns).ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_read_back_exactly() {
        let weird = "ac\"me\\ \n\u{7}é😀";
        let cases = [
            Call::new("t"),
            Call::new("mcp:github/search")
                .tenant("acme")
                .tokens(1_200)
                .count(3),
            Call::new("x")
                .tenant(weird)
                .max_wait(Duration::from_millis(250)),
            Call::new("x").max_wait(Duration::from_nanos(1_000_000_001)),
            Call::new("x").max_wait(Duration::from_micros(1_500)),
            Call::new("x").tenant("").max_wait(Duration::ZERO),
        ];
        for call in cases {
            let info = CallInfo::read(&call).unwrap_or_else(|| panic!("{call:?}"));
            assert_eq!(info.rebuild(call.tool_name()), call);
        }
        let info = CallInfo::read(&Call::new("x").tenant(weird)).expect("readable");
        assert_eq!(info.tenant.as_deref(), Some(weird));
    }
}
