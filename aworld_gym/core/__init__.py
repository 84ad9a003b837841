"""The generic MCP text environment and its parts."""
