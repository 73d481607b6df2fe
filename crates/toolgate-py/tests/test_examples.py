"""The one-page examples run as written (offline, or against a `toolgate serve`
started here), and docs/python.md shows the Agent Framework, Google ADK and client
examples verbatim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support import gateway


EXAMPLES = Path(__file__).parent.parent / "examples"
DOCS = Path(__file__).parents[3] / "docs" / "python.md"


def run(name: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_agent_framework_example() -> None:
    out = run("agent_framework_example.py")
    assert out.startswith("6 tool calls ran, 4 were rejected:")
    assert out.count("lookup_customer: rate_limited") == 3 and out.count("get_payment_status: rate_limited") == 1


def test_the_openai_agents_example() -> None:
    assert run("openai_agents_example.py").splitlines() == [
        "wrapper:   2 lookups ran, 3 were rejected by toolgate",
        "guardrail: 2 lookups ran, 3 were rejected by toolgate",
    ]


def test_the_langchain_example() -> None:
    lines = run("langchain_example.py").splitlines()
    assert [line.split()[1] for line in lines] == ["success", "success", "error", "error", "error"]


def test_the_adk_example() -> None:
    lines = run("adk_example.py").splitlines()
    assert lines[0] == "2 lookups ran, 3 were rejected:"
    assert [line.split(",")[0] for line in lines[1:]] == ["- get_weather: rate_limited"] * 3


def test_the_docs_show_the_adk_example_verbatim() -> None:
    example = (EXAMPLES / "adk_example.py").read_text()
    body = example[example.index("import asyncio") :]
    assert body.strip() in DOCS.read_text()


def test_the_client_example_against_the_bundled_config() -> None:
    with gateway(None) as base:
        lines = run("client_example.py", {"TOOLGATE_URL": base}).splitlines()
    assert lines[:2] == ["lookup 0: admitted (waited 0.0s)", "lookup 1: admitted (waited 0.0s)"]
    # 0.5 s less the time the two admissions took (a loaded machine may show 0.4).
    assert lines[2] in (f"lookup 2: rate_limited by tools.lookup_customer.rate, retry in {t}s" for t in ("0.5", "0.4"))
    assert lines[3] == "reserved: get_payment_status, search_documents, search_documents"
    assert lines[4] == "in flight: {'get_payment_status': 0, 'lookup_customer': 0, 'search_documents': 0}"


def test_the_docs_show_the_client_example_verbatim() -> None:
    example = (EXAMPLES / "client_example.py").read_text()
    body = example[example.index("import os") :]
    assert body.strip() in DOCS.read_text()


def test_the_docs_show_the_agent_framework_example_verbatim() -> None:
    example = (EXAMPLES / "agent_framework_example.py").read_text()
    body = example[example.index("import asyncio") :]
    assert body.strip() in DOCS.read_text()
