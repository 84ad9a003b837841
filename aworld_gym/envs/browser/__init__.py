"""AWorld/Browser-v0: MiniWoB++ web tasks in a real headless Chromium through the Playwright MCP server."""
