//! Processes of a test: `redis-server` on a free port and `toolgate serve`, each
//! killed on drop.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` of this test, killed on drop.
pub struct Redis {
    child: Child,
    pub port: u16,
    dir: std::path::PathBuf,
}

/// How many threads of process `pid` serve connections on a runtime of their own
/// (`toolgate-core-<i>`), read from `/proc`.
#[cfg(target_os = "linux")]
pub fn core_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the process's threads")
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|name| name.starts_with("toolgate-core-"))
        .count()
}

/// A `toolgate serve` process, killed on drop.
pub struct Gateway {
    pub child: Child,
    pub base: String,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Whether redis-server exists; a missing one fails the test (so CI notices)
/// unless `TOOLGATE_SKIP_REDIS=1` outside CI.
pub fn redis_available() -> bool {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let in_ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    if !found && std::env::var("TOOLGATE_SKIP_REDIS").as_deref() == Ok("1") && !in_ci {
        eprintln!("redis-server not found; skipped because TOOLGATE_SKIP_REDIS=1");
        return false;
    }
    assert!(found, "redis-server not found (scripts/test installs it)");
    true
}

impl Redis {
    pub fn start() -> Self {
        for _ in 0..10 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!("toolgate-gw-redis-{port}"));
            let _ = std::fs::create_dir_all(&dir);
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--dir"])
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server starts");
            let mut r = Self { child, port, dir };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if r.ping() {
                    return r;
                }
                if let Ok(Some(_)) = r.child.try_wait() {
                    break; // the port was taken meanwhile
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        panic!("could not start redis-server");
    }

    fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Gateway {
    /// `toolgate serve --listen 127.0.0.1:0 --config CONFIG ARGS…`, once it listens.
    pub fn start(config: &std::path::Path, args: &[&str]) -> Self {
        Self::start_with_env(config, args, &[])
    }

    /// As [`Gateway::start`], with `envs` set in the process's environment.
    pub fn start_with_env(config: &std::path::Path, args: &[&str], envs: &[(&str, &str)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(config)
            .args(args)
            .envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn toolgate");
        let out = child.stdout.take().expect("stdout");
        let base = BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| {
                l.strip_prefix("toolgate listening on ")
                    .and_then(|r| r.split_whitespace().next())
                    .map(str::to_string)
            })
            .expect("the address line");
        Self { child, base }
    }

    /// Kills the process with SIGKILL: no drain, no clean-up.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
