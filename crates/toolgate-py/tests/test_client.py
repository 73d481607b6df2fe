"""``toolgate.Client`` against a real ``toolgate serve`` (started here on a free port,
with bearer tokens and an upstream for invoke)."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from support import Upstream, free_port, gateway, upstream

from toolgate import AdmissionRejected, Client, ClientError, Lease, Rejection, ToolRateLimitPolicy
from toolgate.testing import ManualClock

ADMIN = "acme-admin-token"
BETA = "beta-token"


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


TOOLS = """
[tools.lookup_customer]
rate = "2/s"
burst = 2

[tools.per_tenant]
rate = "1/min"
partition = "tenant"

[tools.one_at_a_time]
concurrency = 1

[tools.paused]
rate = "100/s"

[tools.waits]
rate = "1/s"
burst = 1
on_limit = "wait"
max_wait = "3s"

[tools.plan_a]
rate = "2/min"

[tools.plan_b]
rate = "1/min"
"""


def config(upstream_url: str) -> str:
    return f"""
[gateway]
request_timeout = "5s"

[[gateway.tokens]]
tenant = "acme"
sha256 = "{_sha(ADMIN)}"
admin = true

[[gateway.tokens]]
tenant = "beta"
sha256 = "{_sha(BETA)}"
{TOOLS}
[tools.echo]
rate = "100/s"
[tools.echo.upstream]
url = "{upstream_url}/echo"

[tools.broken]
rate = "100/s"
[tools.broken.upstream]
url = "{upstream_url}/broken"
"""


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with upstream() as up, gateway(config(up)) as base:
        yield base


@pytest.fixture
def client(base_url: str) -> Iterator[Client]:
    with Client(base_url, token=ADMIN, timeout=10) as c:
        yield c


def test_admit_is_a_context_manager_that_completes_the_lease(client: Client) -> None:
    with client.admit("one_at_a_time") as lease:
        assert isinstance(lease, Lease) and lease.tool == "one_at_a_time" and len(lease.id) == 32
        assert client.tool("one_at_a_time")["in_flight"] == 1
        with pytest.raises(AdmissionRejected) as e:
            client.admit("one_at_a_time")
        assert (e.value.reason, e.value.quota) == ("concurrency_limited", "tools.one_at_a_time.concurrency")
    assert lease.done
    assert client.tool("one_at_a_time")["in_flight"] == 0, "completing the lease freed the slot"
    with client.admit("one_at_a_time"):
        pass


def test_a_rejection_has_the_same_fields_as_in_process(client: Client) -> None:
    local = ToolRateLimitPolicy.from_toml(TOOLS, clock=ManualClock())
    for _ in range(2):
        client.admit("lookup_customer").complete()
        local.try_admit("lookup_customer")
    with pytest.raises(AdmissionRejected) as e:
        client.admit("lookup_customer")
    there = local.try_admit("lookup_customer")
    assert isinstance(there, Rejection)
    assert (e.value.tool, e.value.quota, e.value.reason) == (there.tool, there.quota, there.reason)
    assert e.value.retry_after is not None and there.retry_after is not None
    assert e.value.retry_after == pytest.approx(there.retry_after, abs=0.15)


def test_a_429_raised_in_the_block_pauses_the_tool_on_the_gateway(client: Client) -> None:
    request = httpx.Request("GET", "https://api.example.test/")
    limited = httpx.HTTPStatusError(
        "429", request=request, response=httpx.Response(429, headers={"Retry-After": "20"}, request=request)
    )
    with pytest.raises(httpx.HTTPStatusError), client.admit("paused"):
        raise limited
    with pytest.raises(AdmissionRejected) as e:
        client.admit("paused")
    assert (e.value.reason, e.value.quota) == ("rate_limited", "tools.paused.retry_after")
    assert e.value.retry_after is not None and 15 < e.value.retry_after <= 20


def test_reserve_is_all_or_nothing_and_gives_back_what_was_not_used(client: Client) -> None:
    with pytest.raises(AdmissionRejected) as e:
        client.reserve({"plan_a": 1, "plan_b": 2})
    assert e.value.quota == "tools.plan_b.rate"
    with client.reserve([("plan_a", 2), "plan_b"], ttl=30) as plan:
        assert [lease.tool for lease in plan.leases] == ["plan_a", "plan_a", "plan_b"]
        assert plan.expires_in == pytest.approx(30.0)
        with pytest.raises(AdmissionRejected):
            client.admit("plan_b")  # all of plan_b is reserved
        plan.leases[0].complete()
    # Leaving the block gave back the two leases not used: plan_b has room again.
    client.admit("plan_b").complete()
    with pytest.raises(AdmissionRejected):
        client.admit("plan_b")


def test_invoke_runs_the_upstream_and_reports_its_errors(client: Client) -> None:
    done = client.invoke("echo", {"id": "c-42"}, idempotency_key="step-1")
    assert done.outcome == "success" and done.status == 200 and done.attempts == 1
    assert done.latency is not None and 0 <= done.latency < 5
    assert done.result == {"echo": {"id": "c-42"}}
    assert ("/echo", {"id": "c-42"}) in Upstream.seen
    with pytest.raises(ClientError) as e:
        client.invoke("broken", {})
    assert (e.value.status, e.value.code) == (502, "upstream_error")
    with pytest.raises(ClientError) as e:
        client.invoke("lookup_customer", {})
    assert (e.value.status, e.value.code) == (404, "no_upstream")


def test_tools_lists_the_live_state(client: Client) -> None:
    names = {t["tool"] for t in client.tools()}
    assert {"lookup_customer", "echo", "waits"} <= names
    with pytest.raises(ClientError) as e:
        client.tool("no_such_tool")
    assert (e.value.status, e.value.code) == (404, "unknown_tool")
    assert "no_such_tool" in e.value.message


def test_the_token_decides_the_tenant(base_url: str) -> None:
    with Client(base_url) as anonymous, pytest.raises(ClientError) as e:
        anonymous.admit("lookup_customer")
    assert (e.value.status, e.value.code) == (401, "unauthorized")
    with Client(base_url, token="not-a-token") as wrong, pytest.raises(ClientError) as e:
        wrong.tools()
    assert e.value.code == "unauthorized"
    with Client(base_url, token=BETA, tenant="acme") as other, pytest.raises(ClientError) as e:
        other.admit("per_tenant")
    assert (e.value.status, e.value.code) == (403, "forbidden")
    with Client(base_url, token=ADMIN) as acme, Client(base_url, token=BETA, tenant="beta") as beta:
        acme.admit("per_tenant").complete()
        with pytest.raises(AdmissionRejected):
            acme.admit("per_tenant")
        beta.admit("per_tenant").complete()  # beta's partition is its own


def test_a_waiting_admission_gets_more_time_than_the_timeout(base_url: str) -> None:
    with Client(base_url, token=ADMIN, timeout=0.5) as c:
        c.admit("waits").complete()
        lease = c.admit("waits", max_wait=2.0)  # waits ~1 s, longer than the timeout
        assert 0.5 < lease.waited <= 1.6
        lease.complete()


def test_errors_without_an_answer_are_client_errors() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", timeout=2) as c, pytest.raises(ClientError) as e:
        c.tools()
    assert e.value.code == "connection_error" and e.value.status is None
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(silent.accept()[0]), daemon=True).start()
    try:
        with Client(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=0.3) as c:
            t0 = time.monotonic()
            with pytest.raises(ClientError) as e:
                c.tools()
            assert e.value.code == "timeout" and time.monotonic() - t0 < 3
    finally:
        for s in accepted:
            s.close()
        silent.close()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.admit(""), "tool: '': must be a non-empty string"),
        (lambda c: c.admit("t", tokens=-1), "tokens: -1: must be between 0 and"),
        (lambda c: c.admit("t", tokens=2**60), "tokens: 1152921504606846976: must be between 0"),
        (lambda c: c.admit("t", max_wait=float("nan")), "max_wait: nan: must be a finite number"),
        (lambda c: c.admit("t", tenant="x" * 5000), "tenant: 5000 bytes: must be at most 4096"),
        (lambda c: c.reserve({}), "calls: must name at least one tool"),
        (lambda c: c.reserve({"t": 0}), "calls[].count: 0: must be between 1 and 1000"),
        (lambda c: c.reserve({"t": 1}, ttl=-1), "ttl: -1: must be between 0 and"),
        (lambda c: c.invoke("t", [1, 2]), "arguments: list: must be a mapping"),
    ],
)
def test_invalid_arguments_are_refused_before_sending(call: object, message: str) -> None:
    with Client("http://127.0.0.1:9", timeout=1) as c, pytest.raises(ValueError) as e:
        call(c)  # type: ignore[operator]
    assert message in str(e.value)


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="base_url"):
        Client("127.0.0.1:8787")
    with pytest.raises(ValueError, match="timeout: 0: must be greater than 0"):
        Client(timeout=0)
    with pytest.raises(ValueError, match="timeout: inf"):
        Client(timeout=float("inf"))
    with pytest.raises(ValueError, match="token: must be a non-empty string of printable ASCII"):
        Client(token="a\r\nX-Injected: 1")
    with pytest.raises(ValueError, match="token"):
        Client(token="jeton-été")
