"""Model FLOPs of a traced step: its matmuls, counted from the jaxpr.

The compiler's cost analysis counts a `while` body once, so a model whose
layers run as one scan would report a layer's FLOPs for the whole stack.
Counting the jaxpr instead multiplies a scan's body by its length, and sees
the backward pass and any rematerialised forward as the equations they are.
Only matmuls count (`dot_general`, convolutions): 2 x output elements x
contracted size each, the usual numerator of MFU.
"""

import math

import jax
from jax.extend import core

_SUBJAXPR_PARAMS = ("jaxpr", "call_jaxpr", "fun_jaxpr", "body_jaxpr")


def _dot_flops(eqn) -> float:
  lhs = eqn.invars[0].aval
  (contract, _), _ = eqn.params["dimension_numbers"]
  inner = math.prod(lhs.shape[d] for d in contract)
  return 2.0 * math.prod(eqn.outvars[0].aval.shape) * inner


def _conv_flops(eqn) -> float:
  rhs = eqn.invars[1].aval  # kernel: out features x in features x window
  out = eqn.outvars[0].aval
  per_output = math.prod(rhs.shape) / rhs.shape[
      eqn.params["dimension_numbers"].rhs_spec[0]]
  return 2.0 * math.prod(out.shape) * per_output


def _inner(eqn) -> list:
  """The sub-jaxprs an equation runs, each with how often it runs."""
  if eqn.primitive.name == "scan":
    return [(eqn.params["jaxpr"], eqn.params["length"])]
  if eqn.primitive.name == "cond":
    return [(max(eqn.params["branches"], key=count), 1)]
  found = []
  for key in _SUBJAXPR_PARAMS:
    sub = eqn.params.get(key)
    if sub is not None:
      found.append((sub, 1))
  return found


def count(jaxpr) -> float:
  """Matmul FLOPs of one run of `jaxpr` (a Jaxpr or ClosedJaxpr)."""
  jaxpr = jaxpr.jaxpr if isinstance(jaxpr, core.ClosedJaxpr) else jaxpr
  total = 0.0
  for eqn in jaxpr.eqns:
    name = eqn.primitive.name
    if name == "dot_general":
      total += _dot_flops(eqn)
    elif name == "conv_general_dilated":
      total += _conv_flops(eqn)
    for sub, times in _inner(eqn):
      total += times * count(sub)
  return total


def of_traced(fn, *args) -> float:
  """Matmul FLOPs of `fn(*args)` (args may be ShapeDtypeStructs); a jitted
  `fn` is traced as it is."""
  traced = fn.trace(*args) if hasattr(fn, "trace") else jax.jit(fn).trace(
      *args)
  return count(traced.jaxpr)
