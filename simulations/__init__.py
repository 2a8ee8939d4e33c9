"""Simulation scripts and reporting utilities for fedspectral experiments."""
