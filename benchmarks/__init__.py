"""Benchmarks: scripts that compare rewrite-tuner with its peers in the same run and save their
results (with machine, versions, commit and seeds) in ``benchmarks/results/``.

Run one from the repository root as ``python -m benchmarks.<name>`` (``make bench`` runs all).
"""
