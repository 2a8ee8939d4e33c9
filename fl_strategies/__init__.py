"""Federated spectral and low-rank algorithms as Flower strategies, and the kernels they share."""
