"""Which members of a per-family sweep `make test` runs.

A sweep repeats one check over every family (a real step at each
family's smallest released size, each config's sharded step, each
family's export, each family's harness row). `make test` runs a sweep on
the core families, whose code every other family builds on; the other
members are marked `sweep`, which `make test-all` runs too.
"""

import pytest

CORE_FAMILIES = ("bert", "gpt2", "t5")


def sweep(params, family=lambda p: p[0] if isinstance(p, tuple) else p):
  """`params` for `parametrize`, members whose `family(p)` is not a core
  family marked `sweep` (ids unchanged)."""
  out = []
  for p in params:
    values = p if isinstance(p, tuple) else (p,)
    marks = () if family(p) in CORE_FAMILIES else (pytest.mark.sweep,)
    out.append(pytest.param(*values, marks=marks))
  return out
