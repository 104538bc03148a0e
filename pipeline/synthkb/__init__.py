"""synthkb: the embedded synthetic knowledge base with exact false-negative truth (docs/synthkb.md)."""
