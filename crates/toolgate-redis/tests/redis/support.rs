//! Real `redis-server` processes on free ports, killed on drop, and `[store]` sections for them.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use toolgate::config::{Config, StoreConfig};

/// A `redis-server` started for one test, killed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
}

/// Whether redis-server exists; panics (so CI fails loudly) unless
/// `TOOLGATE_SKIP_REDIS=1` asks to skip locally (ignored when `CI` is set).
pub fn redis_available() -> bool {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return true;
    }
    let in_ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    if std::env::var("TOOLGATE_SKIP_REDIS").as_deref() == Ok("1") && !in_ci {
        eprintln!("redis-server not found; skipped because TOOLGATE_SKIP_REDIS=1");
        return false;
    }
    panic!(
        "redis-server not found: these tests need a real Redis. Install it \
         (scripts/test.d/30-redis.sh does: apt-get install -y redis-server) or, \
         locally only, set TOOLGATE_SKIP_REDIS=1"
    );
}

/// A port that was free a moment ago (and, with `bus`, port + 10000 too).
pub fn free_port(bus: bool) -> u16 {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    loop {
        if !bus {
            if let Ok(l) = TcpListener::bind("127.0.0.1:0") {
                if let Ok(a) = l.local_addr() {
                    return a.port();
                }
            }
            continue;
        }
        // Cluster nodes also listen on port + 10000: pick below 55536.
        let seed =
            u64::from(std::process::id()) * 7919 + SEQ.fetch_add(1, Ordering::Relaxed) * 104_729;
        let port = 20_000 + u16::try_from(seed % 30_000).unwrap_or(0);
        let a = TcpListener::bind(("127.0.0.1", port));
        let b = TcpListener::bind(("127.0.0.1", port + 10_000));
        if a.is_ok() && b.is_ok() {
            return port;
        }
    }
}

// === impl RedisServer ===

impl RedisServer {
    /// Starts a server on a free port (retrying on a collision).
    pub fn start() -> Self {
        Self::start_with(&[], false)
    }

    /// Starts a server with extra arguments.
    pub fn start_with(extra: &[&str], bus: bool) -> Self {
        for _ in 0..10 {
            let port = free_port(bus);
            let dir =
                std::env::temp_dir().join(format!("toolgate-redis-{}-{port}", std::process::id()));
            let _ = std::fs::create_dir_all(&dir);
            let mut s = Self {
                child: None,
                port,
                dir,
                extra: extra.iter().map(|s| s.to_string()).collect(),
            };
            if s.spawn() {
                return s;
            }
        }
        panic!("could not start redis-server on a free port");
    }

    fn spawn(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Some(c) = &mut self.child {
                if let Ok(Some(_)) = c.try_wait() {
                    self.child = None;
                    return false; // port taken meanwhile
                }
            }
            if self.ping() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn ping(&self) -> bool {
        self.conn()
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c).ok())
            .is_some()
    }

    pub fn conn(&self) -> Option<redis::Connection> {
        let client = redis::Client::open(self.url()).ok()?;
        client
            .get_connection_with_timeout(Duration::from_millis(200))
            .ok()
    }

    /// Runs a command and returns its reply.
    pub fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut c = self.conn().expect("connect to redis-server");
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut c).expect("redis command")
    }

    /// Keys under `prefix`.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        self.cmd(&["KEYS", &format!("{prefix}*")])
    }

    /// SIGKILL, as a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts again on the same port (state is gone: no persistence).
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.spawn() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not restart on port {}", self.port);
    }

    /// SIGSTOP / SIGCONT: a server that hangs without closing connections.
    pub fn pause(&self, on: bool) {
        if let Some(c) = &self.child {
            let sig = if on { "-STOP" } else { "-CONT" };
            let ok = Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "kill {sig} redis-server");
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.pause(false);
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Held by the tests that load the machine or measure time (multi-process, faults),
/// so that they do not run at the same time.
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A unique key prefix for one test.
pub fn prefix(name: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    format!(
        "tg-test:{name}:{}:{}:",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// A `[store]` section for `url`.
pub fn store(url: &str, prefix: &str, extra: &str) -> StoreConfig {
    let toml = format!("[store]\nurl = {url:?}\nkey_prefix = {prefix:?}\n{extra}");
    Config::from_toml_str(&toml)
        .expect("valid store config")
        .store
        .expect("a store section")
}

/// A bucket's state: its TAT in whole µs and the remainder in `1/den` µs (the first
/// two of the four little-endian doubles the scripts keep, `docs/redis.md`), or
/// `None` for a missing key.
pub fn tat(conn: &mut redis::Connection, key: &str) -> Option<(u64, u64)> {
    let v: Option<Vec<u8>> = redis::cmd("GET").arg(key).query(conn).expect("state");
    let v = v?;
    assert_eq!(v.len(), 32, "{v:?}");
    let num = |i: usize| {
        let mut b = [0; 8];
        b.copy_from_slice(&v[8 * i..8 * i + 8]);
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "the scripts keep integers below 2^53"
        )]
        let n = f64::from_le_bytes(b) as u64;
        n
    };
    Some((num(0), num(1)))
}
