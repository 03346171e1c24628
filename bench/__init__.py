"""Benchmark and evaluation scripts that print figures (LoCoMo evidence recall, ...)."""
