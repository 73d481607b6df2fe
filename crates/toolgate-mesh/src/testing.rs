//! A real `nats-server -js` for tests (feature `test-util`): an ephemeral port on
//! loopback and a store directory of its own, killed (and the directory removed)
//! when dropped. It can be killed with SIGKILL and started again on the same port
//! and store, as a broker crash is.
//!
//! The binary is `$TOOLGATE_NATS_SERVER`, else `nats-server` on the `PATH`, else
//! `/usr/sbin/nats-server` (Debian's package; `scripts/test` installs it).

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A `nats-server` with JetStream, for one test.
#[derive(Debug)]
#[must_use = "the server is stopped when dropped"]
pub struct NatsServer {
    child: Option<Child>,
    /// Its client port on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
}

/// The `nats-server` binary to run.
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("TOOLGATE_NATS_SERVER") {
        return p.into();
    }
    let on_path = Command::new("nats-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if on_path {
        "nats-server".into()
    } else {
        "/usr/sbin/nats-server".into()
    }
}

fn free_port() -> u16 {
    loop {
        if let Ok(a) = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
            return a.port();
        }
    }
}

// === impl NatsServer ===

impl NatsServer {
    /// Starts a server and waits until it accepts connections.
    ///
    /// # Panics
    ///
    /// When the binary is missing or the server does not come up within 10 s: the
    /// test cannot run without it.
    pub fn start() -> Self {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "toolgate-nats-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let mut s = Self {
            child: None,
            port: free_port(),
            dir,
        };
        s.spawn();
        s
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let bin = binary();
        let child = Command::new(&bin)
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {} ({e}): the mesh tests need a real nats-server \
                     (scripts/test installs Debian's nats-server; or set TOOLGATE_NATS_SERVER)",
                    bin.display()
                )
            });
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < until,
                "nats-server did not start on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server with SIGKILL (no clean shutdown), keeping its store.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port and store.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
