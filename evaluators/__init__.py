"""Benchmarks: tasks, agent contracts, host-side scoring."""
