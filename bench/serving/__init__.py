"""Benchmarks through HTTP: a server started on loopback and driven by closed-loop clients."""
