"""Benchmarks: scripts that print and plot what the engines cost (timings are machine-dependent)."""
