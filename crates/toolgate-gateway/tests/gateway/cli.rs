//! The `toolgate serve` process: address and curl on stdout, exit codes, SIGHUP
//! reload and graceful shutdown.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn toolgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
}

/// Starts `toolgate serve` and reads its address from stdout.
fn serve(args: &[&str]) -> (Child, String, Vec<String>) {
    serve_on("127.0.0.1:0", args)
}

/// [`serve`], listening on `listen`.
fn serve_on(listen: &str, args: &[&str]) -> (Child, String, Vec<String>) {
    spawn_serve(listen, args, Stdio::null())
}

/// [`serve`], with its log (stderr) piped to the test.
#[cfg(unix)]
fn serve_logged(args: &[&str]) -> (Child, String) {
    let (child, base, _) = spawn_serve("127.0.0.1:0", args, Stdio::piped());
    (child, base)
}

fn spawn_serve(listen: &str, args: &[&str], stderr: Stdio) -> (Child, String, Vec<String>) {
    let mut child = toolgate()
        .arg("serve")
        .args(["--listen", listen])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn toolgate");
    let out = child.stdout.take().expect("stdout");
    let mut lines = Vec::new();
    let mut base = None;
    for line in BufReader::new(out).lines().take(4) {
        let line = line.expect("line");
        if let Some(rest) = line.strip_prefix("toolgate listening on ") {
            base = rest.split_whitespace().next().map(str::to_string);
        }
        lines.push(line);
    }
    (child, base.expect("address line"), lines)
}

#[cfg(unix)]
fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok);
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    for _ in 0..500 {
        if let Some(s) = child.try_wait().expect("wait") {
            return s;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    panic!("toolgate did not exit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_prints_its_address_and_a_curl_and_serves_the_bundled_config() {
    let (mut child, base, lines) = serve(&[]);
    assert!(base.starts_with("http://127.0.0.1:"), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("curl -s -X POST") && l.contains(&base)),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("loopback only")),
        "{lines:?}"
    );
    let http = reqwest::Client::new();
    let health = http
        .get(format!("{base}/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status(), 200);
    let tools: serde_json::Value = http
        .get(format!("{base}/v1/tools"))
        .send()
        .await
        .expect("tools")
        .json()
        .await
        .expect("json");
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["tool"].as_str())
        .collect();
    assert_eq!(
        names,
        ["get_payment_status", "lookup_customer", "search_documents"]
    );
    let metrics = crate::support::get_text(&http, &format!("{base}/metrics")).await;
    assert!(
        metrics.contains("toolgate_admissions_total{tool=\"lookup_customer\""),
        "{metrics}"
    );
    assert!(
        metrics.contains("toolgate_circuit_state{tool=\"lookup_customer\"} 0"),
        "{metrics}"
    );
    #[cfg(unix)]
    {
        signal(&child, "-TERM");
        assert!(wait_exit(&mut child).success(), "graceful shutdown exits 0");
    }
    #[cfg(not(unix))]
    let _ = child.kill();
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_config_file_keeping_state() {
    let dir = std::env::temp_dir().join(format!("toolgate-hup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("c.toml");
    std::fs::write(&path, "[tools.a]\nrate = \"1/min\"\n").expect("write");
    let (mut child, base, _) = serve(&["--config", path.to_str().expect("utf-8")]);
    let http = reqwest::Client::new();
    let admit = |tool: &'static str| {
        let http = http.clone();
        let url = format!("{base}/v1/admit");
        async move {
            http.post(url)
                .json(&serde_json::json!({"tool": tool}))
                .send()
                .await
                .expect("admit")
                .status()
                .as_u16()
        }
    };
    assert_eq!(admit("a").await, 200);
    std::fs::write(
        &path,
        "[tools.a]\nrate = \"1/min\"\n[tools.b]\nrate = \"1/min\"\n",
    )
    .expect("write");
    signal(&child, "-HUP");
    let mut seen = false;
    for _ in 0..500 {
        let r = http
            .get(format!("{base}/v1/tools/b"))
            .send()
            .await
            .expect("get");
        if r.status() == 200 {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(seen, "b appears after SIGHUP");
    assert_eq!(admit("a").await, 429, "a's state was kept");
    signal(&child, "-INT");
    assert!(wait_exit(&mut child).success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_within_the_shutdown_grace_while_a_client_holds_a_partial_head() {
    // Regression (#13, item 5): SIGTERM never finished while one client held a
    // partial request head.
    use std::io::Read;
    use tokio::io::AsyncWriteExt;
    let dir = std::env::temp_dir().join(format!("toolgate-grace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("c.toml");
    std::fs::write(
        &path,
        "[gateway]\nshutdown_grace = \"1s\"\nheader_read_timeout = \"60s\"\n\
         [tools.t]\nrate = \"1/s\"\n",
    )
    .expect("write");
    let (mut child, base) = serve_logged(&["--config", path.to_str().expect("utf-8")]);
    let mut slow = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .expect("connect");
    slow.write_all(b"POST /v1/admit HTTP/1.1\r\nHost: g\r\nContent-")
        .await
        .expect("write");
    // An answer on a later connection: the held one was accepted before it.
    let health = reqwest::get(format!("{base}/healthz"))
        .await
        .expect("healthz");
    assert_eq!(health.status(), 200);
    let start = std::time::Instant::now();
    signal(&child, "-TERM");
    let status = wait_exit(&mut child);
    let took = start.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(took >= Duration::from_millis(800), "exited after {took:?}");
    assert!(took < Duration::from_secs(4), "exited after {took:?}");
    let mut log = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut log);
    assert!(log.contains("1 connection(s) cut off"), "{log}");
    drop(slow);
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_is_fitted_to_the_file_descriptor_limit() {
    use std::io::Read;
    // Soft 600, hard 1024: the gateway raises the soft limit to 1024, which leaves
    // 1024 - 256 (reserve) - 64 (overflow) = 704 connections, and says so.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -S -n 600 && ulimit -H -n 1024 && exec \"$0\" serve --listen 127.0.0.1:0")
        .arg(env!("CARGO_BIN_EXE_toolgate"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let out = child.stdout.take().expect("stdout");
    let first = BufReader::new(out)
        .lines()
        .next()
        .expect("a line")
        .expect("line");
    let base = first
        .strip_prefix("toolgate listening on ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("{first}"))
        .to_string();
    let health: serde_json::Value = reqwest::get(format!("{base}/healthz"))
        .await
        .expect("healthz")
        .json()
        .await
        .expect("json");
    assert_eq!(health["connections"]["limit"], 704, "{health}");
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).expect("limits");
    let files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("open files");
    assert!(files.split_whitespace().nth(3) == Some("1024"), "{files}");
    signal(&child, "-TERM");
    assert!(wait_exit(&mut child).success());
    let mut log = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut log);
    assert!(
        log.contains("raised the soft file-descriptor limit"),
        "{log}"
    );
    assert!(log.contains("serving at most 704"), "{log}");
}

#[test]
fn an_invalid_config_exits_1_listing_every_error() {
    let dir = std::env::temp_dir().join(format!("toolgate-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "[gateway]\nlease_ttl = \"never\"\n[tools.x]\nrate = \"0/s\"\nbrust = 1\n",
    )
    .expect("write");
    let out = toolgate()
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("3 error(s)"), "{err}");
    assert!(err.contains("gateway.lease_ttl: \"never\""), "{err}");
    assert!(err.contains("tools.x.brust: unknown key"), "{err}");
    assert!(
        err.contains("tools.x.rate: \"0/s\": the request count must be at least 1"),
        "{err}"
    );
    let check = toolgate()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("run");
    assert_eq!(check.status.code(), Some(1));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_reads_json_by_its_content_or_an_upper_case_extension() {
    // Regression: only names ending in lower-case `.json` were read as JSON, so a JSON
    // config in `policy.JSON` or `policy.conf` failed with a TOML syntax error.
    let dir = std::env::temp_dir().join(format!("toolgate-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let check = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        let out = toolgate()
            .args(["check", "--config"])
            .arg(&path)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), err)
    };
    let good = r#"{"tools": {"lookup_customer": {"rate": "2/s", "burst": 2}}}"#;
    for name in ["policy.JSON", "policy.conf", "policy"] {
        assert_eq!(check(name, good), (Some(0), String::new()), "{name}");
    }
    let (code, err) = check(
        "bad.conf",
        "\n  {\"tools\": {\"lookup_customer\": {\"rate\": \"0/s\", \"brust\": 1}}}",
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("2 error(s)"), "{err}");
    assert!(
        err.contains("tools.lookup_customer.rate: \"0/s\": the request count must be at least 1"),
        "{err}"
    );
    assert!(
        err.contains("tools.lookup_customer.brust: unknown key"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_listens_on_a_host_name_such_as_localhost() {
    // Regression: `--listen` took only `IP:PORT`, so `--listen localhost:8787` was a
    // usage error (exit 2).
    let (mut child, base, _) = serve_on("localhost:0", &[]);
    let _ = child.kill();
    let _ = child.wait();
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
}

/// In memory, `toolgate serve` serves its connections on the shared worker pool, with
/// no runtime per core: those pay only where requests wait for Redis (the Redis
/// store's test counts one per core).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_connections_are_served_by_the_shared_worker_pool() {
    let (mut child, base, _) = serve(&[]);
    let status = reqwest::get(format!("{base}/v1/tools"))
        .await
        .map(|r| r.status().as_u16());
    let cores = crate::procs::core_threads(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status.ok(), Some(200));
    assert_eq!(cores, 0);
}

#[test]
fn an_unknown_store_is_refused_with_exit_2() {
    let out = toolgate()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            "postgres://:secret@127.0.0.1:1/db",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown store"), "{err}");
    assert!(!err.contains("secret"), "{err}");
}

#[test]
fn a_public_address_without_tokens_is_refused_unless_allowed() {
    let out = toolgate()
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without authentication"), "{err}");
}
