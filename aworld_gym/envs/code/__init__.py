"""AWorld/Code-v0: HumanEval (or your own tasks) with sandboxed Python execution over MCP."""
