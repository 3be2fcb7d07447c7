"""The fuzz suite: mutation operators, a valid-graph generator, the oracle and a worker pool.

A package (rather than loose test modules) so that ``benchmarks/fuzz.py`` and the
pool's spawned workers import the same code as the CI slice in ``test_fuzz.py``.
"""
