"""A Streamable HTTP upstream for the tests: an MCP server built with the `mcp`
package's MCPServer (formerly FastMCP), serving `lookup_customer` at
http://127.0.0.1:PORT/mcp. Run as `python crm_server.py PORT`."""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

app = MCPServer("crm", log_level="WARNING")


@app.tool(description="Look up a customer by id")
def lookup_customer(customer_id: int) -> str:
    return f"customer {customer_id}: Ada Lovelace"


if __name__ == "__main__":
    app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
