"""An https:// upstream (issue 16): crm_server.py served by uvicorn over TLS on
loopback, with a certificate for 127.0.0.1 from a CA made at test time (trustme).
toolgate trusts that CA through the server's `ca_file` (or `SSL_CERT_FILE`), and no
other server's certificate; an untrusted one leaves its server unconnected with an
error that names it, and toolgate serves the others."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
import trustme
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import Gateway, start_crm, start_gateway, tokens_table


@dataclass
class Pki:
    """The files of a test CA and of the server's certificate it signed."""

    ca: str  # the CA's certificate (what toolgate is told to trust)
    other_ca: str  # a CA that signed nothing toolgate reaches
    cert: str  # the server's chain
    key: str  # the server's key


@pytest.fixture(scope="module")
def pki() -> Iterator[Pki]:
    ca, other = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    with tempfile.TemporaryDirectory() as d:
        files = Pki(*(str(Path(d) / n) for n in ("ca.pem", "other-ca.pem", "cert.pem", "key.pem")))
        ca.cert_pem.write_to_path(files.ca)
        other.cert_pem.write_to_path(files.other_ca)
        server.private_key_and_cert_chain_pem.write_to_path(files.cert)
        server.private_key_pem.write_to_path(files.key)
        yield files


@pytest.fixture(scope="module")
def crm(pki: Pki) -> Iterator[str]:
    """The upstream over https, on an ephemeral port."""
    yield from start_crm(pki.cert, pki.key)


def server_table(name: str, url: str, ca_file: str | None = None) -> str:
    ca = f'ca_file = "{ca_file}"' if ca_file else ""
    return f"""
[mcp.servers.{name}]
url = "{url}"
{ca}
"""


def servers(gw: Gateway) -> dict[str, dict]:
    r = httpx2.get(f"{gw.url}/v1/mcp", headers=gw.headers())
    r.raise_for_status()
    return {s["name"]: s for s in r.json()["servers"]}


async def list_and_call(gw: Gateway, tool: str) -> tuple[list[str], str]:
    http = create_mcp_http_client(headers=gw.headers())
    async with Client(streamable_http_client(gw.mcp, http_client=http), cache=None) as c:  # type: ignore[arg-type]
        names = sorted(t.name for t in (await c.list_tools()).tools)
        result = await c.call_tool(tool, {"customer_id": 7})
    assert not result.is_error, result
    return names, result.content[0].text  # type: ignore[union-attr]


async def test_an_https_upstream_is_reached_with_its_ca_file(pki: Pki, crm: str) -> None:
    config = tokens_table() + server_table("crm", crm, pki.ca)
    for gw in start_gateway(config):
        assert servers(gw)["crm"]["connected"], servers(gw)
        names, text = await list_and_call(gw, "crm__lookup_customer")
        assert names == ["crm__lookup_customer"]
        assert text == "customer 7: Ada Lovelace"
        assert gw.upstream_calls("mcp:crm/lookup_customer") == 1


async def test_without_a_ca_file_ssl_cert_file_is_trusted(pki: Pki, crm: str) -> None:
    config = tokens_table() + server_table("crm", crm)
    for gw in start_gateway(config, env={"SSL_CERT_FILE": pki.ca}):
        assert servers(gw)["crm"]["connected"], servers(gw)
        _, text = await list_and_call(gw, "crm__lookup_customer")
        assert text == "customer 7: Ada Lovelace"


async def test_an_untrusted_certificate_leaves_its_server_down_and_the_others_up(pki: Pki, crm: str) -> None:
    config = (
        tokens_table()
        + server_table("crm", crm, pki.ca)
        + server_table("stranger", crm, pki.other_ca)  # the wrong CA
        + server_table("system", crm)  # the system's roots, which do not hold the test CA
        # the right CA, but the certificate is for 127.0.0.1 only
        + server_table("misnamed", crm.replace("127.0.0.1", "localhost"), pki.ca)
    )
    for gw in start_gateway(config):
        view = servers(gw)
        for name in ("stranger", "system"):
            s = view[name]
            assert not s["connected"], s
            assert "certificate" in s["error"] and "UnknownIssuer" in s["error"], s
            assert f"server={name}" in "".join(gw.stderr), gw.stderr
        misnamed = view["misnamed"]
        assert not misnamed["connected"] and "not valid for name" in misnamed["error"], misnamed
        # toolgate runs on: the trusted server's tools are served, and only they.
        names, text = await list_and_call(gw, "crm__lookup_customer")
        assert names == ["crm__lookup_customer"]
        assert text == "customer 7: Ada Lovelace"
        assert gw.process.poll() is None
        assert gw.upstream_calls("mcp:stranger/lookup_customer") == 0
