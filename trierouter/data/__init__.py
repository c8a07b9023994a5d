"""Data loaders: real label sets, tool registries and benchmarks, fetched into the cache."""
