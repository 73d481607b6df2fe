"""A Streamable HTTP upstream for the tests: an MCP server built with the `mcp`
package's MCPServer (formerly FastMCP), serving `lookup_customer` at
http://127.0.0.1:PORT/mcp. Run as `python crm_server.py PORT`, or as
`python crm_server.py PORT CERTFILE KEYFILE` to serve https://127.0.0.1:PORT/mcp
(uvicorn's TLS, with the PEM certificate chain and key given)."""

from __future__ import annotations

import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

app = MCPServer("crm", log_level="WARNING")


@app.tool(description="Look up a customer by id")
def lookup_customer(customer_id: int) -> str:
    return f"customer {customer_id}: Ada Lovelace"


if __name__ == "__main__":
    port = int(sys.argv[1])
    if len(sys.argv) == 4:
        uvicorn.run(
            app.streamable_http_app(host="127.0.0.1"),
            host="127.0.0.1",
            port=port,
            ssl_certfile=sys.argv[2],
            ssl_keyfile=sys.argv[3],
            log_level="warning",
        )
    else:
        app.run("streamable-http", host="127.0.0.1", port=port)
