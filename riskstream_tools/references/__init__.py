"""Reference implementations used as oracles by tests and benchmarks."""
