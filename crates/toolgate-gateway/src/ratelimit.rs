//! The IETF `RateLimit-Policy` and `RateLimit` headers
//! (draft-ietf-httpapi-ratelimit-headers), for the request-rate quota of a tool.
//!
//! ```text
//! RateLimit-Policy: "tools.lookup_customer.rate";q=2;w=1
//! RateLimit: "tools.lookup_customer.rate";r=1;t=1
//! ```
//! `q` is the quota (the burst, or N of a sliding window), `w` the window in seconds,
//! `r` what is left now and `t` the seconds until the quota is full again (on a 429,
//! until the call could be admitted).

use hashbrown::HashMap;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use toolgate::config::Window;
use toolgate::{Engine, Permit, Policy, Rejection};

/// `RateLimit-Policy` of every tool with a request rate.
#[derive(Debug, Default)]
pub struct Headers {
    /// By tool name. `hashbrown`'s default hasher (foldhash, seeded per process):
    /// looked up on every admission, and its keys are the policy's, so SipHash's
    /// resistance to chosen collisions would buy nothing here at about 150
    /// instructions a lookup.
    by_tool: HashMap<String, Info>,
}

#[derive(Debug)]
struct Info {
    path: String,
    policy: HeaderValue,
    /// `"<path>";r=`, the start of every `RateLimit` value.
    prefix: Box<[u8]>,
    q: u64,
    per_token: Duration,
    window: Duration,
    sliding: bool,
}

/// The figures of one tool's headers, read at a moment and written later.
#[derive(Debug, Clone, Copy)]
pub struct Figures<'a> {
    info: Option<&'a Info>,
    left: Option<u64>,
}

static POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

// === impl Headers ===

impl Headers {
    /// The header info of every tool of `policy` with a `rate`.
    pub fn new(policy: &Policy) -> Self {
        let by_tool = policy
            .tools
            .iter()
            .filter_map(|(name, t)| {
                let rate = t.quota.rate?;
                let sliding = t.quota.window == Window::Sliding;
                let q = if sliding {
                    rate.count()
                } else {
                    t.quota.burst.unwrap_or(rate.count())
                };
                let path = format!("tools.{}.rate", path_key(name));
                let w = ceil_secs(rate.period());
                let policy =
                    HeaderValue::from_str(&format!("{};q={q};w={w}", sf_string(&path))).ok()?;
                let per_token = rate.period() / u32::try_from(rate.count()).unwrap_or(u32::MAX);
                let prefix = format!("{};r=", sf_string(&path)).into_bytes().into();
                Some((
                    name.clone(),
                    Info {
                        path,
                        policy,
                        prefix,
                        q,
                        per_token,
                        window: rate.period(),
                        sliding,
                    },
                ))
            })
            .collect();
        Self { by_tool }
    }

    /// What the headers of an admission of `tool` say, read off its `permit` before
    /// the permit goes into its lease ([`toolgate::Permit::available`]: no lookup by
    /// name, no reference count moved on the tool); only the policy without
    /// `remaining` (`ratelimit_remaining = false`: no live state read).
    pub fn admitted(
        &self,
        permit: &Permit,
        tool: &str,
        tenant: Option<&str>,
        remaining: bool,
    ) -> Figures<'_> {
        let info = self.by_tool.get(tool);
        let left = info
            .filter(|_| remaining)
            .and_then(|i| permit.available(&i.path, tenant));
        Figures { info, left }
    }

    /// Both headers for `tool` as it stands now.
    fn current(&self, h: &mut HeaderMap, engine: &Engine, tool: &str, tenant: Option<&str>) {
        let info = self.by_tool.get(tool);
        let left = info.and_then(|i| engine.available(tool, &i.path, tenant));
        Figures { info, left }.put(h);
    }

    /// Adds the headers after a rejection.
    pub fn rejected(
        &self,
        h: &mut HeaderMap,
        engine: &Engine,
        r: &Rejection,
        tenant: Option<&str>,
    ) {
        match self.by_tool.get(r.tool()) {
            Some(info) if info.path == r.quota() => {
                let t = r.retry_after().map_or(ceil_secs(info.window), ceil_secs);
                info.put(h, 0, t);
            }
            Some(_) => self.current(h, engine, r.tool(), tenant),
            None => {}
        }
    }
}

impl Figures<'_> {
    /// Adds both headers (only `RateLimit-Policy` when there is no live figure: not
    /// asked for, or a partitioned quota asked without a tenant); nothing for a tool
    /// without a rate.
    pub fn put(self, h: &mut HeaderMap) {
        let Some(info) = self.info else {
            return;
        };
        let Some(left) = self.left else {
            h.insert(POLICY.clone(), info.policy.clone());
            return;
        };
        let t = if info.sliding {
            ceil_secs(info.window)
        } else {
            ceil_secs(info.per_token * u32::try_from(info.q.saturating_sub(left)).unwrap_or(0))
        };
        info.put(h, left, t);
    }
}

impl Info {
    /// Adds `RateLimit-Policy` and `RateLimit: "<path>";r=<r>;t=<t>`, the latter
    /// written from the precomputed prefix without `format!` (it is on the admit path).
    fn put(&self, h: &mut HeaderMap, r: u64, t: u64) {
        h.insert(POLICY.clone(), self.policy.clone());
        let mut v = StackBuf::new();
        let value = if v.push(&self.prefix)
            && v.push_u128(r.into())
            && v.push(b";t=")
            && v.push_u128(t.into())
        {
            HeaderValue::from_bytes(v.as_bytes())
        } else {
            let prefix = String::from_utf8_lossy(&self.prefix);
            HeaderValue::from_str(&format!("{prefix}{r};t={t}"))
        };
        if let Ok(v) = value {
            h.insert(RATELIMIT.clone(), v);
        }
    }
}

/// A small buffer on the stack for header values and bodies of the hot path.
#[derive(Debug)]
pub(crate) struct StackBuf {
    buf: [u8; 192],
    len: usize,
}

impl StackBuf {
    pub(crate) fn new() -> Self {
        Self {
            buf: [0; 192],
            len: 0,
        }
    }

    /// Appends `bytes`; `false` (and nothing appended) when they do not fit.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> bool {
        let Some(dst) = self.buf.get_mut(self.len..self.len + bytes.len()) else {
            return false;
        };
        dst.copy_from_slice(bytes);
        self.len += bytes.len();
        true
    }

    /// Appends `n` in decimal.
    pub(crate) fn push_u128(&mut self, n: u128) -> bool {
        // 128-bit division is a library call per digit, so digits come from 64-bit
        // words: the values of the hot path (remaining counts, seconds, milliseconds)
        // are a single word.
        const WORD: u128 = 10_000_000_000_000_000_000; // 10^19
        match u64::try_from(n) {
            Ok(n) => self.push_u64(n, 1),
            Err(_) => {
                let low = u64::try_from(n % WORD).unwrap_or(0);
                self.push_u128(n / WORD) && self.push_u64(low, 19)
            }
        }
    }

    /// Appends `n` in decimal, zero-padded to at least `width` digits: two digits
    /// per division, from a table of the hundred pairs.
    fn push_u64(&mut self, mut n: u64, width: usize) -> bool {
        const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
            2021222324252627282930313233343536373839\
            4041424344454647484950515253545556575859\
            6061626364656667686970717273747576777879\
            8081828384858687888990919293949596979899";
        let mut digits = [b'0'; 20];
        let mut i = digits.len();
        while n >= 100 {
            let pair = usize::try_from(n % 100).unwrap_or(0) * 2;
            n /= 100;
            i -= 2;
            digits[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        }
        if n >= 10 {
            let pair = usize::try_from(n).unwrap_or(0) * 2;
            i -= 2;
            digits[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        } else {
            i -= 1;
            digits[i] = b'0' + u8::try_from(n).unwrap_or(0);
        }
        self.push(&digits[i.min(digits.len() - width)..])
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// A tool name as the core writes it in quota paths: bare when it is made of
/// letters, digits, `_` and `-`, quoted otherwise (`tools."mcp:github/x".rate`).
fn path_key(name: &str) -> String {
    let simple = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if simple {
        name.to_string()
    } else {
        format!("{name:?}")
    }
}

/// A structured-field string: quoted, with `\` and `"` escaped.
fn sf_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Whole seconds, rounded up.
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate::Call;

    #[test]
    fn headers_name_the_tools_rate_quota_and_what_is_left() {
        let policy = Policy::from_toml_str("[tools.t]\nrate = \"2/s\"\nburst = 4").expect("policy");
        let engine = Engine::new(policy.clone());
        let headers = Headers::new(&policy);
        let p = engine.try_admit(&Call::new("t")).expect("admitted");
        let mut h = HeaderMap::new();
        headers.admitted(&p, "t", None, true).put(&mut h);
        assert_eq!(h["ratelimit-policy"], "\"tools.t.rate\";q=4;w=1");
        assert_eq!(h["ratelimit"], "\"tools.t.rate\";r=3;t=1");
        let mut b = StackBuf::new();
        let big = u128::from(u64::MAX);
        assert!(b.push(b"x=") && b.push_u128(0) && b.push(b",") && b.push_u128(u128::MAX));
        assert!(b.push(b",") && b.push_u128(big) && b.push(b",") && b.push_u128(big + 1));
        assert!(b.push(b",") && b.push_u128(1_234_567));
        let want = format!("x=0,{},{big},{},1234567", u128::MAX, big + 1);
        assert_eq!(b.as_bytes(), want.as_bytes());
        assert!(!b.push(&[b'y'; 192]), "does not fit");
        assert_eq!(ceil_secs(Duration::from_millis(1500)), 2);
        assert_eq!(ceil_secs(Duration::from_secs(2)), 2);
    }

    /// Every number is written as `format!` writes it: each below 10^4, each power
    /// of ten and its neighbours, and the words' limits with the 19-digit padding.
    #[test]
    fn numbers_are_written_in_decimal_exactly() {
        let mut cases: Vec<u128> = (0..10_000).collect();
        for e in 0..39 {
            let p = 10u128.pow(e);
            cases.extend([p - 1, p, p + 1]);
        }
        cases.extend([u128::from(u64::MAX), u128::from(u64::MAX) + 1, u128::MAX]);
        for n in cases {
            let mut b = StackBuf::new();
            assert!(b.push_u128(n));
            assert_eq!(b.as_bytes(), n.to_string().as_bytes(), "{n}");
        }
    }
}
