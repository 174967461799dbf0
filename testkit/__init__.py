"""Helpers for tests, benchmarks and examples: the real models and data to run them on."""
