"""What a compiled program moves between chips, read from its HLO text.

Every collective instruction of the optimized module is counted once per
execution: instructions inside a `while` body count as many times as the
loop runs (a scan over layers: its known trip count, or the bound its
condition compares the counter with), those in called computations as
often as their callers run. Bytes are what one chip sends:

  all-reduce          2 (g - 1) / g x size   (ring reduce-scatter + gather)
  all-gather          (g - 1) / g x output
  reduce-scatter      (g - 1) / g x input    (also XLA's all-reduce fused
                                              with a dynamic slice)
  all-to-all          (g - 1) / g x size
  collective-permute  size

with g the replica group's size. Between slices (multi-slice), the TPU
compiler turns the cross-slice part of a collective into host transfers
(`send`s tagged with a megascale transfer type) over the data-center
network; they count in `dcn_bytes` with g the number of slices, the
send's payload being one slice's share.
"""

import collections
import math
import re

import numpy as np

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
         "collective-permute")
_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2,
                "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8,
                "f64": 8, "c64": 8, "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1,
                "s4": 0.5, "u4": 0.5}
_SHAPE = re.compile(r"\b([a-z]+[0-9a-z]*)\[([0-9,]*)\]")
_HEADER = re.compile(r"^(ENTRY )?%([\w.\-]+) .*\{\s*$")
_INSTR = re.compile(
    r"^\s*(?:ROOT )?%?([\w.\-]+) = (.*?) ([a-z][\w\-]*)\((.*)$")
_CALLS = re.compile(r"(?:calls|body|to_apply|condition)=%([\w.\-]+)")
_BRANCHES = re.compile(r"(?:branch_computations|called_computations)=\{([^}]*)\}")
_MEGASCALE = re.compile(r'_xla_megascale_transfer_type="(\w+)"')
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def shape_bytes(text: str) -> list[float]:
  """Bytes of each array shape written in `text` (e.g. an output type)."""
  out = []
  for dtype, dims in _SHAPE.findall(text):
    if dtype in _DTYPE_BYTES:
      n = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
      out.append(n * _DTYPE_BYTES[dtype])
  return out


def computations(text: str) -> tuple[dict[str, list[str]], str]:
  """{computation name: its instruction lines}, and the entry's name."""
  comps, entry, current = {}, "", None
  for line in text.splitlines():
    header = _HEADER.match(line)
    if header and "=" not in line.split("{")[0].split("(")[0]:
      current = header[2]
      comps[current] = []
      if header[1]:
        entry = current
    elif line.strip() == "}":
      current = None
    elif current is not None:
      comps[current].append(line)
  return comps, entry


def multipliers(comps: dict[str, list[str]], entry: str) -> dict[str, int]:
  """How many times each computation runs per execution of the entry."""
  edges = collections.defaultdict(list)
  for name, lines in comps.items():
    for line in lines:
      times = trip_count(line, comps) if " while(" in line else 1
      for callee in _CALLS.findall(line):
        is_body = f"body=%{callee}" in line
        edges[name].append((callee, times if is_body else 1))
      for group in _BRANCHES.findall(line):
        for callee in re.findall(r"%([\w.\-]+)", group):
          edges[name].append((callee, 1))
  runs = collections.Counter()

  def visit(name, times, depth=0):
    if depth > 64:
      return
    runs[name] += times
    for callee, k in edges.get(name, ()):
      visit(callee, times * k, depth + 1)

  visit(entry, 1)
  return dict(runs)


def trip_count(line: str, comps: dict[str, list[str]]) -> int:
  """A while loop's trip count: XLA's `known_trip_count`, else read from
  its condition `counter < constant` (a scan counts from 0 by 1); 1 when
  neither says."""
  known = _TRIP.search(line)
  if known:
    return int(known[1])
  cond = re.search(r"condition=%([\w.\-]+)", line)
  lines = comps.get(cond[1], []) if cond else []
  constants = {}
  for body in lines:
    m = re.match(r"\s*%?([\w.\-]+) = s32\[\]\S* constant\((\d+)\)", body)
    if m:
      constants[m[1]] = int(m[2])
  for body in lines:
    m = re.search(r"ROOT .* compare\(%?([\w.\-]+), %?([\w.\-]+)\), "
                  r"direction=LT", body)
    if m and m[2] in constants:
      return constants[m[2]]
  return 1


def loops(text: str) -> int:
  """How many `while` loops of the module run more than once."""
  comps, _ = computations(text)
  return sum(1 for lines in comps.values() for line in lines
             if " while(" in line and trip_count(line, comps) > 1)


def replica_groups(line: str) -> list[list[int]] | None:
  """The replica groups of a collective line, as lists of device ids."""
  explicit = re.search(r"replica_groups=\{(\{[\d,\s]*\}(?:,\{[\d,\s]*\})*)\}",
                       line)
  if explicit:
    return [[int(x) for x in g.split(",") if x.strip()]
            for g in re.findall(r"\{([\d,\s]*)\}", explicit[1])]
  iota = re.search(r"replica_groups=\[(\d+),(\d+)\]<=\[([\d,]+)\]"
                   r"(?:T\(([\d,]+)\))?", line)
  if iota:
    return _iota(iota[3], iota[4]).reshape(int(iota[1]),
                                           int(iota[2])).tolist()
  mesh = re.search(r"replica_groups=mesh\[([^\]]*)\]", line)
  if mesh:
    axes = re.findall(r"'(\w+)'=(\d+)", mesh[1])
    names, sizes = [a for a, _ in axes], [int(s) for _, s in axes]
    ids = re.search(r"device_ids=\(\[([\d,]+)\](?:T\(([\d,]+)\))?\)", line)
    flat = (_iota(ids[1], ids[2]).ravel() if ids
            else np.arange(math.prod(sizes)))
    after = line[mesh.end():]
    chosen = re.match(r"[^{]*\{([^}]*)\}", after)
    picked = re.findall(r"'(\w+)'", chosen[1]) if chosen else names
    grid = flat.reshape(sizes)
    keep = [i for i, a in enumerate(names) if a not in picked]
    move = [names.index(a) for a in picked]
    size = math.prod(sizes[i] for i in move)
    return grid.transpose(keep + move).reshape(-1, size).tolist()
  return None


def _iota(dims: str, perm: str | None) -> np.ndarray:
  shape = [int(d) for d in dims.split(",")]
  array = np.arange(math.prod(shape)).reshape(shape)
  return array.transpose([int(p) for p in perm.split(",")]) if perm else array


def _sent(kind: str, sizes: list[float], group: int, operands: str) -> float:
  """Bytes one chip sends for one execution (see the module docstring)."""
  if group <= 1 and kind != "collective-permute":
    return 0.0
  frac = (group - 1) / group
  if kind == "all-reduce":
    return 2 * frac * sum(sizes)
  if kind == "reduce-scatter":
    return frac * sum(shape_bytes(operands) or sizes)
  if kind == "collective-permute":
    return float(sum(sizes))
  return frac * sum(sizes)


def collectives(text: str, num_slices: int = 1) -> dict[str, dict]:
  """Per kind: executions, bytes one chip sends, and those over the DCN.

  Args:
    text: the optimized HLO module (`compiled.as_text()`).
    num_slices: slices the program spans (the group of a DCN transfer).

  Returns:
    {kind: {"count", "bytes", "dcn_bytes"}} for the kinds that occur.
  """
  comps, entry = computations(text)
  runs = multipliers(comps, entry)
  out = {}
  for name, lines in comps.items():
    times = runs.get(name, 0)
    for line in lines:
      m = _INSTR.match(line)
      if not m or times == 0:
        continue
      found = _collective(name, m, line, num_slices)
      if found is None:
        continue
      kind, sent, dcn = found
      row = out.setdefault(kind, {"count": 0, "bytes": 0.0, "dcn_bytes": 0.0})
      row["count"] += times
      row["bytes"] += sent * times
      row["dcn_bytes"] += sent * times if dcn else 0.0
  return out


def _collective(computation: str, m, line: str, num_slices: int):
  """(kind, bytes one chip sends, over the DCN?) of one instruction, or
  None when it is not a collective."""
  op = m[3][:-len("-start")] if m[3].endswith("-start") else m[3]
  sizes = shape_bytes(m[2])
  if op == "send":
    dcn = _MEGASCALE.search(line)
    if not dcn or not sizes:
      return None
    kind = dcn[1].lower().replace("_", "-")
    payload = sizes[0]  # the send's tuple: payload, context, token
    if kind == "all-gather":  # the payload is one slice's piece
      payload *= num_slices
    return kind, _sent(kind, [payload], num_slices, ""), True
  if op not in KINDS:
    return None
  kind = "reduce-scatter" if (op == "all-reduce" and computation.startswith(
      "all-reduce-scatter")) else op
  if m[3].endswith("-start") and sizes:
    sizes = [max(sizes)]  # a start's tuple holds operand and result
  groups = replica_groups(line) or [[0]]
  return kind, _sent(kind, sizes, len(groups[0]), m[4].split("),")[0]), False


def largest_values(text: str, top: int = 5) -> list[dict]:
  """The biggest arrays the program defines: name, type, bytes and the jax
  operation that made them (from the HLO metadata), largest first."""
  found = []
  for line in text.splitlines():
    m = _INSTR.match(line)
    if not m or m[3] in ("parameter", "get-tuple-element", "bitcast",
                         "tuple", "constant"):
      continue
    sizes = shape_bytes(m[2])
    if not sizes:
      continue
    source = re.search(r'op_name="([^"]*)"', line)
    found.append({"name": m[1], "type": _SHAPE.search(m[2])[0],
                  "bytes": max(sizes),
                  "op": source[1] if source else m[3]})
  found.sort(key=lambda v: -v["bytes"])
  seen, out = set(), []
  for value in found:
    if value["op"] not in seen:
      seen.add(value["op"])
      out.append(value)
    if len(out) == top:
      break
  return out
