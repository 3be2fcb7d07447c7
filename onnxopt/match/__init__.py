"""Stage 3: the pattern language and the matcher (patterns, bindings, best partial match)."""
