"""Differential fuzzing of kiln's compiler: random programs, run eager and compiled, compared.

`python -m kiln.fuzz --minutes N` runs a time-boxed campaign; tests/fuzz runs a quick
budget in CI. Needs hypothesis (the ``test`` extra).
"""
