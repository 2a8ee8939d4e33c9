"""Data sets and partitions of simulated federations (the harness side: generators, files split by a partitioner, user-item interactions, supervised ERM sets)."""
