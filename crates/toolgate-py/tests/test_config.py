"""Configs from Python values, dicts and TOML; invalid values name their field."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolgate import Permit, RateLimit, Rejection, ToolRateLimitPolicy
from toolgate.testing import ManualClock

FULL = """
unknown_tools = "allow"

[defaults]
on_limit = "reject"

[pools.crm]
rate = "3/s"
burst = 3

[tools.lookup_customer]
rate = "2/s"
burst = 2
pools = ["crm"]
concurrency = 4

[tools.update_customer]
rate = "5/s"
pools = ["crm"]

[tools.search_documents]
rate = "10/s"
tokens = "1000/min"
on_limit = "wait"
max_wait = "2s"

[tools.run_report]
concurrency = 2

[tools.per_tenant]
rate = "1/s"
partition = "tenant"
"""


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: RateLimit(requests=0, per_seconds=1.0), "requests"),
        (lambda: RateLimit(requests=1.5, per_seconds=1.0), "requests"),  # type: ignore[arg-type]
        (lambda: RateLimit(requests=2, per_seconds=0), "per_seconds"),
        (lambda: RateLimit(requests=2, per_seconds=float("nan")), "per_seconds"),
        (lambda: RateLimit(requests=2, per_seconds=1.0, burst=0), "burst"),
        (lambda: ToolRateLimitPolicy(limits={"t": RateLimit(1)}, on_limit="block"), "on_limit"),  # type: ignore[arg-type]
        (lambda: ToolRateLimitPolicy(limits={"t": RateLimit(1)}, max_wait=-1), "max_wait"),
        (lambda: ToolRateLimitPolicy(limits={"t": 3}), "limits['t']"),  # type: ignore[dict-item]
        (lambda: ToolRateLimitPolicy(limits={"t": RateLimit(1)}, store="postgres://x"), "store"),
        (lambda: ToolRateLimitPolicy.from_dict({"tools": {"t": {"rate": "0/s"}}}), "tools.t.rate"),
        (lambda: ToolRateLimitPolicy.from_dict({"tools": {"t": {"rate": "2/s", "burst": 0}}}), "tools.t.burst"),
        (lambda: ToolRateLimitPolicy.from_dict({"tools": {"t": {"rat": "2/s"}}}), "tools.t"),
        (lambda: ToolRateLimitPolicy.from_dict({"tools": {"t": {"pools": ["nope"]}}}), "tools.t.pools"),
        (lambda: ToolRateLimitPolicy.from_toml('[tools.t]\nconcurrency = 0\n'), "tools.t.concurrency"),
        (lambda: ToolRateLimitPolicy(limits={"t": {"rate": "x/s"}}), "tools.t.rate"),
    ],
)
def test_invalid_values_raise_value_error_naming_the_field(make: object, field: str) -> None:
    with pytest.raises(ValueError) as e:
        make()  # type: ignore[operator]
    assert str(e.value).startswith(field), str(e.value)


def test_the_rust_message_says_what_is_wrong() -> None:
    with pytest.raises(ValueError, match=r'tools\.t\.rate: "0/s": the request count must be at least 1'):
        ToolRateLimitPolicy.from_dict({"tools": {"t": {"rate": "0/s"}}})


def test_a_store_that_is_not_redis_raises_value_error_naming_store() -> None:
    with pytest.raises(ValueError, match="store"):
        ToolRateLimitPolicy(limits={"t": RateLimit(1)}, store="postgres://127.0.0.1:1/0")
    with pytest.raises(ValueError, match="store"):
        ToolRateLimitPolicy.from_toml('[store]\nurl = "mysql://h"\n[tools.t]\nrate = "1/s"\n')


def test_from_toml_reads_a_file_or_text(tmp_path: Path) -> None:
    f = tmp_path / "policy.toml"
    f.write_text(FULL)
    for source in (f, str(f), FULL):
        assert ToolRateLimitPolicy.from_toml(source).tools == {
            "lookup_customer", "update_customer", "search_documents", "run_report", "per_tenant"
        }


def test_pools_are_all_or_nothing() -> None:
    clock = ManualClock()
    p = ToolRateLimitPolicy.from_toml(FULL, clock=clock)
    held = [p.try_admit("lookup_customer") for _ in range(2)]
    assert all(isinstance(h, Permit) for h in held)
    assert isinstance(p.try_admit("update_customer"), Permit)
    r = p.try_admit("update_customer")
    assert isinstance(r, Rejection) and (r.reason, r.quota) == ("rate_limited", "pools.crm.rate")
    # The tool's own quota said no to the lookup: the pool was not charged.
    clock.advance(0.34)
    r2 = p.try_admit("lookup_customer")
    assert isinstance(r2, Rejection) and r2.quota == "tools.lookup_customer.rate"
    assert isinstance(p.try_admit("update_customer"), Permit)


def test_concurrency_is_released_on_completion() -> None:
    p = ToolRateLimitPolicy.from_toml(FULL, clock=ManualClock())
    a, b = p.try_admit("run_report"), p.try_admit("run_report")
    r = p.try_admit("run_report")
    assert isinstance(r, Rejection) and r.reason == "concurrency_limited" and r.retry_after is None
    assert isinstance(a, Permit) and isinstance(b, Permit)
    a.complete()
    assert isinstance(p.try_admit("run_report"), Permit)
    b.release()


def test_a_permit_reprs_in_python_spelling() -> None:
    # Regression: the repr showed Rust's spelling, `Permit(tool=Some("t"), waited=0, done=false)`.
    p = ToolRateLimitPolicy(limits={"t": RateLimit(1)}, clock=ManualClock())
    permit = p.try_admit("t")
    assert isinstance(permit, Permit)
    assert repr(permit) == "Permit(tool='t', waited=0.0, done=False)"
    permit.complete()
    assert repr(permit) == "Permit(tool=None, waited=0.0, done=True)"
    other = p.try_admit("no_policy")
    assert repr(other) == "Permit(tool=None, waited=0.0, done=False)"


def test_token_budgets_are_reconciled_against_the_actual_count() -> None:
    p = ToolRateLimitPolicy.from_toml(FULL, clock=ManualClock())
    big = p.try_admit("search_documents", tokens=900)
    assert isinstance(big, Permit)
    r = p.try_admit("search_documents", tokens=200)
    assert isinstance(r, Rejection) and (r.reason, r.quota) == ("tokens_limited", "tools.search_documents.tokens")
    big.complete(tokens=100)  # 800 refunded
    assert isinstance(p.try_admit("search_documents", tokens=200), Permit)
    never = p.try_admit("search_documents", tokens=5000)
    assert isinstance(never, Rejection) and never.reason == "cost_exceeds_capacity" and never.retry_after is None


def test_partitions_are_per_tenant() -> None:
    p = ToolRateLimitPolicy.from_toml(FULL, clock=ManualClock())
    assert isinstance(p.try_admit("per_tenant", tenant="a"), Permit)
    assert isinstance(p.try_admit("per_tenant", tenant="a"), Rejection)
    assert isinstance(p.try_admit("per_tenant", tenant="b"), Permit)


def test_unknown_tools_can_be_denied() -> None:
    p = ToolRateLimitPolicy(limits={"t": RateLimit(1)}, unknown_tools="deny")
    r = p.try_admit("other")
    assert isinstance(r, Rejection) and r.reason == "unknown_tool"


def test_decisions_reach_the_hook_and_the_log_without_arguments(caplog: pytest.LogCaptureFixture) -> None:
    seen = []
    p = ToolRateLimitPolicy(limits={"t": RateLimit(1)}, clock=ManualClock(), on_decision=seen.append)
    with caplog.at_level("DEBUG", logger="toolgate"):
        p.try_admit("t")
        p.try_admit("t")
    assert [(d.tool, d.admitted, d.reason) for d in seen] == [("t", True, None), ("t", False, "rate_limited")]
    assert "t admitted" in caplog.text and "t rejected: rate_limited" in caplog.text


def test_rejections_are_values_and_exceptions_that_pickle() -> None:
    import pickle

    from toolgate import AdmissionRejected

    r = Rejection("t", "tools.t.rate", "rate_limited", 0.5)
    assert pickle.loads(pickle.dumps(r)) == r
    e = AdmissionRejected.from_rejection(r)
    back = pickle.loads(pickle.dumps(e))
    assert (back.tool, back.quota, back.reason, back.retry_after) == ("t", "tools.t.rate", "rate_limited", 0.5)
    assert str(back) == "call to 't' rejected: rate_limited by tools.t.rate; retry after 0.500s"
    with pytest.raises(ValueError, match="reason"):
        Rejection("t", "q", "bored")


def test_a_store_that_could_not_decide_is_told_apart_by_a_field_not_by_its_text() -> None:
    assert Rejection("t", "store", "circuit_open").store_unavailable
    assert not Rejection("t", "tools.t.circuit", "circuit_open").store_unavailable
    assert not Rejection("t", "tools.t.rate", "rate_limited", 0.5).store_unavailable


async def test_the_middleware_takes_the_tenant_from_tenant_of() -> None:
    from types import SimpleNamespace

    policy = ToolRateLimitPolicy.from_dict(
        {"tools": {"t": {"rate": "1/s", "partition": "tenant"}}},
        clock=ManualClock(),
        tenant_of=lambda ctx: ctx.metadata["tenant"],
    )
    ran: list[str] = []

    def context(tenant: str) -> SimpleNamespace:
        return SimpleNamespace(function=SimpleNamespace(name="t"), metadata={"tenant": tenant}, result=None)

    contexts = [context(t) for t in ("a", "a", "b")]
    for ctx in contexts:

        async def call_next(tenant: str = ctx.metadata["tenant"]) -> None:
            ran.append(tenant)

        await policy.process(ctx, call_next)
    assert ran == ["a", "b"]
    assert [c.result is None for c in contexts] == [True, False, True]
    assert '"reason":"rate_limited"' in contexts[1].result
    state = policy.state("t", tenant="a")
    assert state is not None and state["rejected"] == 1
