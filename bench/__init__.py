"""Benchmarks for ``make bench``: each ``bench_*.py`` module prints its own ratios."""
