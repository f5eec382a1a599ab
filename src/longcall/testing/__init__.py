"""Support for tests, benchmarks and the demo: fault layers and scripted peers.

Nothing in the product imports this package except the demo, which shows faults on
purpose; it never changes how a real call behaves.
"""
