"""Calibration of the execution-time model: reference loaders, fitting and evaluation.

Reads ``../shared/reference`` at fit time only; the fitted numbers live in
``inferencegym/data/calibration.json``. Refit with ``python -m inferencegym.sim.calibration.fit``.
"""
