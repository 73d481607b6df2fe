//! The connection layer over real loopback connections (issue #13, item 4): header
//! and idle timeouts, the connection limit with health checks still answered.

use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::{
    connect, eventually, get_text, read_until_closed, responses, start, start_shaped, Server,
    SHAPES, SOON,
};

/// A request head cut off before its end.
const PARTIAL: &[u8] = b"POST /v1/admit HTTP/1.1\r\nHost: gateway\r\nContent-Type: appl";

/// A client that opens a new connection for every request.
fn unpooled() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client")
}

/// Held by the tests whose connections are refused, for as long as they refuse any:
/// the refusal counter is one for every gateway of this test process, so a test reads
/// it moving by its own refusals only while no other test refuses.
static REFUSING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `n` connections, each holding a partial request head, once the gateway counts them.
async fn hold(s: &Server, n: usize) -> Vec<TcpStream> {
    let before = open_and_overflow(s);
    let mut held = Vec::new();
    for _ in 0..n {
        let mut c = connect(s).await;
        c.write_all(PARTIAL).await.expect("write");
        held.push(c);
    }
    eventually("the held connections are accepted", SOON, || async {
        open_and_overflow(s) == before + n
    })
    .await;
    held
}

/// Connections go to the core with the fewest open ones, are served there, and
/// leave their core's count when they close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_spread_over_the_cores_and_served_there() {
    let s = start("[tools.t]\nrate = \"1000/s\"\n").await;
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(connect(&s).await);
    }
    eventually("four connections on two cores", SOON, || async {
        s.cores.as_ref().expect("runtimes per core").open() == [2, 2]
    })
    .await;
    let body = r#"{"tool":"t"}"#;
    let req = format!(
        "POST /v1/admit HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    for c in &mut conns {
        c.write_all(req.as_bytes()).await.expect("write");
    }
    for mut c in conns {
        let (answer, _) = read_until_closed(&mut c, SOON)
            .await
            .expect("answered and closed");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    eventually("every core's count back to zero", SOON, || async {
        s.cores.as_ref().expect("runtimes per core").open() == [0, 0]
    })
    .await;
}

/// One health check on a new kept-alive connection, which is then read until the
/// gateway closes it (within `limit`): the statuses of its answers, and when it closed.
async fn health_check_then_closed(s: &Server, limit: Duration) -> (Vec<u16>, Duration) {
    let mut c = connect(s).await;
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n")
        .await
        .expect("write");
    let (bytes, after) = read_until_closed(&mut c, limit)
        .await
        .unwrap_or_else(|| panic!("not closed within {limit:?}"));
    (responses(&bytes).iter().map(|r| r.status).collect(), after)
}

fn open_and_overflow(s: &Server) -> usize {
    let c = s.state.connections().to_json();
    (c["open"].as_u64().expect("open") + c["overflow"].as_u64().expect("overflow")) as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_request_head_is_closed_after_the_header_read_timeout() {
    // Regression (#13, item 4): a slow request head held its connection forever.
    for shape in SHAPES {
        let s = start_shaped(
            "[gateway]\nheader_read_timeout = \"300ms\"\nidle_timeout = \"20s\"\n",
            shape,
        )
        .await;
        let start = Instant::now();
        let mut slow = connect(&s).await;
        slow.write_all(PARTIAL).await.expect("write");
        let mut silent = connect(&s).await;
        for (what, c) in [("partial head", &mut slow), ("no byte at all", &mut silent)] {
            let (bytes, _) = read_until_closed(c, Duration::from_secs(3))
                .await
                .unwrap_or_else(|| panic!("{what}: still open after 3 s"));
            let after = start.elapsed();
            assert!(bytes.is_empty(), "{what}: {bytes:?}");
            assert!(
                after >= Duration::from_millis(200),
                "{what}: closed after {after:?}"
            );
            assert!(
                after < Duration::from_secs(2),
                "{what}: closed after {after:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_kept_alive_connection_is_closed_after_the_idle_timeout() {
    // Regression (#13, item 4): an idle connection stayed open for over 70 s.
    for shape in SHAPES {
        let s = start_shaped(
            "[gateway]\nheader_read_timeout = \"5s\"\nidle_timeout = \"300ms\"\n",
            shape,
        )
        .await;
        let (statuses, after) = health_check_then_closed(&s, Duration::from_secs(3)).await;
        assert_eq!(statuses, [200]);
        assert!(
            after >= Duration::from_millis(250),
            "closed after {after:?}"
        );
        assert!(after < Duration::from_secs(2), "closed after {after:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_timeout_may_be_longer_than_the_header_read_timeout() {
    // hyper's own header timer also runs between kept-alive requests; ours does not.
    for shape in SHAPES {
        let s = start_shaped(
            "[gateway]\nheader_read_timeout = \"200ms\"\nidle_timeout = \"1500ms\"\n",
            shape,
        )
        .await;
        let (statuses, after) = health_check_then_closed(&s, Duration::from_secs(4)).await;
        assert_eq!(statuses, [200]);
        assert!(
            after >= Duration::from_millis(1200),
            "closed after {after:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_its_answers_is_cut_off_after_the_idle_timeout() {
    for shape in SHAPES {
        let s = start_shaped(
            "[gateway]\nheader_read_timeout = \"5s\"\nidle_timeout = \"300ms\"\n",
            shape,
        )
        .await;
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .set_recv_buffer_size(4096)
            .expect("small receive buffer");
        let addr = s.base.trim_start_matches("http://").parse().expect("addr");
        let mut c = socket.connect(addr).await.expect("connect");
        eventually("the connection is accepted", SOON, || async {
            open_and_overflow(&s) == 1
        })
        .await;
        // 2,000 pipelined requests for the 6 KB dashboard: far more than the socket
        // buffers hold, so the gateway's writes stall.
        let requests = b"GET / HTTP/1.1\r\nHost: g\r\n\r\n".repeat(2000);
        let write = tokio::time::timeout(Duration::from_secs(3), c.write_all(&requests));
        write
            .await
            .expect("the requests fit the buffers")
            .expect("write");
        let start = Instant::now();
        eventually(
            "the stalled connection is closed",
            Duration::from_secs(3),
            || async { open_and_overflow(&s) == 0 },
        )
        .await;
        assert!(
            start.elapsed() >= Duration::from_millis(200),
            "{:?}",
            start.elapsed()
        );
        drop(c);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_admit_longer_than_the_idle_timeout_is_not_cut_off() {
    for shape in SHAPES {
        let s = start_shaped(
            "[gateway]\nheader_read_timeout = \"300ms\"\nidle_timeout = \"300ms\"\n\
         [tools.t]\nrate = \"1/s\"\nburst = 1\non_limit = \"wait\"\nmax_wait = \"3s\"\n",
            shape,
        )
        .await;
        assert_eq!(s.admit("t").await.status, 200);
        let start = Instant::now();
        let waited = s.admit("t").await;
        assert_eq!(waited.status, 200, "{:?}", waited.body);
        assert!(
            start.elapsed() >= Duration::from_millis(600),
            "{:?}",
            start.elapsed()
        );
        assert!(waited.body["waited_ms"].as_u64().expect("waited_ms") >= 500);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_max_connections_health_checks_answer_and_other_requests_get_connection_limit() {
    // Regression (#13, item 4): slow connections used every file descriptor and
    // legitimate admits timed out.
    for shape in SHAPES {
        let s = start_shaped(
            "[gateway]\nmax_connections = 4\nheader_read_timeout = \"5s\"\n\
         [tools.t]\nrate = \"100/s\"\n",
            shape,
        )
        .await;
        let _refusing = REFUSING.lock().await;
        let http = unpooled();
        // Read in the process (a request would open a connection of its own).
        let page = toolgate_gateway::metrics::install().render();
        let refused_before = metric(&page, REFUSED_OVERFLOW);
        let held = hold(&s, 4).await;
        let health = s.send(http.get(s.url("/healthz"))).await;
        assert_eq!(health.status, 200, "{:?}", health.body);
        assert_eq!(health.body["connections"]["open"], 4, "{:?}", health.body);
        assert_eq!(health.body["connections"]["limit"], 4, "{:?}", health.body);
        let admit = s.send(
            http.post(s.url("/v1/admit"))
                .json(&serde_json::json!({"tool": "t"})),
        );
        let admit = admit.await;
        assert_eq!(admit.status, 503, "{:?}", admit.body);
        assert_eq!(admit.body["error"]["code"], "connection_limit");
        assert_eq!(admit.headers["connection"], "close");
        let metrics = s.send(http.get(s.url("/metrics"))).await;
        assert_eq!(
            metrics.status, 503,
            "only /healthz is served beyond the limit"
        );
        assert_eq!(s.tool("t").admitted, 0);

        drop(held);
        eventually("an admit works again", SOON, || async {
            s.send(
                http.post(s.url("/v1/admit"))
                    .json(&serde_json::json!({"tool": "t"})),
            )
            .await
            .status
                == 200
        })
        .await;
        let text = get_text(&http, &s.url("/metrics")).await;
        // This gateway's three: the health check, the admit and the metrics above.
        let refused = metric(&text, REFUSED_OVERFLOW) - refused_before;
        assert!(refused >= 3.0, "{text}");
        assert!(metric(&text, "toolgate_connections") >= 1.0, "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_overflow_are_closed_at_once() {
    for shape in SHAPES {
        let s = start_shaped(
            "[gateway]\nmax_connections = 1\nheader_read_timeout = \"5s\"\n",
            shape,
        )
        .await;
        let _refusing = REFUSING.lock().await;
        // One served, 64 (the least overflow) on the health-only answer.
        let _held = hold(&s, 1 + 64).await;
        let mut extra = connect(&s).await;
        let (bytes, after) = read_until_closed(&mut extra, Duration::from_secs(3))
            .await
            .expect("closed at once");
        assert!(bytes.is_empty(), "{bytes:?}");
        assert!(after < Duration::from_secs(1), "closed after {after:?}");
        assert_eq!(open_and_overflow(&s), 65);
    }
}

/// The series of connections refused onto the health-only answer.
const REFUSED_OVERFLOW: &str = "toolgate_connections_refused_total{action=\"overflow\"}";

/// The value of the series `name` (with its labels) in a Prometheus text page.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .trim()
        .parse()
        .expect("a number")
}
