"""Benchmarks of the gateway (scripts; see BENCHMARKS.md)."""
