"""Differential privacy: noise draws, calibration, accounting and sensitivities."""
