"""AWorld/GAIA-v0: GAIA questions with file, code and search tools, scored by GAIA's official rules."""
