"""Logical axis names, the rules that place them on a mesh, and the mesh.

Models name the axes of their params (`vocab`, `embed`, `heads`, ...) and
of a few activations (`batch`, `length`, `embed`); they never name a mesh
axis. A short rules list maps each logical name to a mesh axis (`data`,
`fsdp`, `tensor`), to a tuple of them, or to None (replicated). Names no
rule mentions are replicated.

Params and optimizer state go through `logical_shardings`, which is strict:
two different logical axes of one array on one mesh axis, or a dimension
that its mesh axes do not divide, is an error naming the param. Activation
constraints use Flax's lenient resolution (inside `activate`), where a mesh
axis already taken by `batch` simply leaves `embed` unsharded.
"""

import contextlib
import math
from typing import Any, Callable, Iterator, Sequence

import flax.linen as nn
import jax
from jax.experimental import mesh_utils
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

MESH_AXES = ("data", "fsdp", "tensor")

# One entry per logical name; the first axis of a batch is split over every
# data-parallel axis, weights over `fsdp` (ZeRO-3 style) and `tensor`.
DEFAULT_RULES = (
    ("batch", ("data", "fsdp")),
    ("length", None),
    ("embed", "fsdp"),
    ("vocab", "tensor"),
    ("heads", "tensor"),
    ("kv", None),
    ("mlp", "tensor"),
    ("embed_out", "tensor"),  # output side of square D -> D projections
    ("layers", None),
    ("positions", None),
    ("relpos_buckets", None),
    ("lstm", None),
    ("char_vocab", None),
    ("adapter", None),
    ("pal", None),
    ("frames", None),  # stacked speech frames' width (Mockingjay's R * M)
    ("classes", None),
    ("entities", None),  # a knowledge base's entity table (ERNIE's)
    ("entity", None),  # entity vectors' width, replicated
)

Rules = tuple[tuple[str, Any], ...]


def check_rules(rules) -> Rules:
  """Validates a rules list and returns it as a tuple of pairs.

  Args:
    rules: a sequence of `(logical_name, target)` pairs (lists from JSON are
      fine) or a dict; `target` is a mesh axis name, a sequence of them, or
      None.

  Returns:
    `((name, target), ...)` with every sequence target made a tuple.

  Raises:
    ValueError: on a malformed pair, an unknown mesh axis, a logical name
      listed twice, or one mesh axis listed twice in one target.
  """
  if isinstance(rules, dict):
    rules = list(rules.items())
  out, seen = [], set()
  for pair in rules:
    if (not isinstance(pair, (tuple, list)) or len(pair) != 2
        or not isinstance(pair[0], str)):
      raise ValueError(
          f"sharding rule {pair!r} is not a (logical_name, mesh_axes) pair")
    name, target = pair
    if name in seen:
      raise ValueError(f"sharding rules list logical axis {name!r} twice")
    seen.add(name)
    axes = _target_axes(target)
    for axis in axes:
      if axis not in MESH_AXES:
        raise ValueError(
            f"sharding rule for {name!r} names mesh axis {axis!r}; mesh axes "
            f"are {MESH_AXES}")
    if len(set(axes)) != len(axes):
      raise ValueError(
          f"sharding rule for {name!r} lists a mesh axis twice: {target!r}")
    out.append((name, None if target is None else
                (target if isinstance(target, str) else tuple(target))))
  return tuple(out)


def _target_axes(target) -> tuple[str, ...]:
  if target is None:
    return ()
  if isinstance(target, str):
    return (target,)
  if isinstance(target, (tuple, list)) and all(
      isinstance(a, str) for a in target):
    return tuple(target)
  raise ValueError(f"sharding rule target {target!r} is not a mesh axis name,"
                   " a sequence of them, or None")


def make_mesh(mesh_cfg, devices: Sequence[jax.Device] | None = None
              ) -> jax.sharding.Mesh:
  """The `(data, fsdp, tensor)` mesh over all devices (of every process).

  Args:
    mesh_cfg: mapping mesh axis name -> size; at most one size is -1, which
      takes the devices the others leave. Missing axes have size 1.
    devices: defaults to `jax.devices()`.

  Returns:
    A Mesh with Auto axis types, axes in the order of `MESH_AXES`. Devices
    of several slices (multi-slice TPU) put `data` across the slices.

  Raises:
    ValueError: on an unknown axis name, a bad size, or sizes whose product
      is not the device count.
  """
  devices = list(jax.devices() if devices is None else devices)
  cfg = dict(mesh_cfg)
  unknown = sorted(set(cfg) - set(MESH_AXES))
  if unknown:
    raise ValueError(f"mesh has unknown axes {unknown}; axes are {MESH_AXES}")
  sizes = [int(cfg.get(a, 1)) for a in MESH_AXES]
  if sizes.count(-1) > 1:
    raise ValueError(f"mesh {cfg} has more than one axis of size -1")
  if any(s == 0 or s < -1 for s in sizes):
    raise ValueError(f"mesh {cfg} has a size that is not positive or -1")
  known = math.prod(s for s in sizes if s != -1)
  if -1 in sizes:
    if len(devices) % known:
      raise ValueError(
          f"mesh {cfg} does not fit {len(devices)} devices: the fixed axes "
          f"take {known}, which does not divide {len(devices)}")
    sizes[sizes.index(-1)] = len(devices) // known
  if math.prod(sizes) != len(devices):
    raise ValueError(
        f"mesh {dict(zip(MESH_AXES, sizes))} has {math.prod(sizes)} devices "
        f"but there are {len(devices)}; use -1 for one axis to take the rest")
  auto = (jax.sharding.AxisType.Auto,) * len(MESH_AXES)
  slices = len({getattr(d, "slice_index", 0) or 0 for d in devices})
  if slices > 1:
    return jax.sharding.Mesh(_multi_slice(sizes, slices, devices),
                             MESH_AXES, axis_types=auto)
  try:
    return jax.make_mesh(tuple(sizes), MESH_AXES, axis_types=auto,
                         devices=devices)
  except (ValueError, NotImplementedError):
    # A TPU axis size that is no product of physical axes (fsdp 8 on a
    # 4x4x4 slice): split a physical axis between two mesh axes.
    grid = mesh_utils.create_device_mesh(tuple(sizes), devices,
                                         allow_split_physical_axes=True)
    return jax.sharding.Mesh(grid, MESH_AXES, axis_types=auto)


def _multi_slice(sizes: list[int], slices: int, devices) -> np.ndarray:
  """The device array of a mesh over several slices: `data` spans them
  (its gradient all-reduce is the only traffic over the data-center
  network); `fsdp` and `tensor` stay inside a slice, on its ICI."""
  if sizes[0] % slices:
    raise ValueError(
        f"mesh {dict(zip(MESH_AXES, sizes))} spans {slices} slices, so its "
        f"data axis ({sizes[0]}) must be a multiple of {slices}: only data "
        "parallelism crosses slices")
  ici = (sizes[0] // slices,) + tuple(sizes[1:])
  dcn = (slices,) + (1,) * (len(sizes) - 1)
  return mesh_utils.create_hybrid_device_mesh(ici, dcn, devices,
                                              allow_split_physical_axes=True)


def mesh_axes_for(names: Sequence[str | None], rules, shape=None,
                  mesh: jax.sharding.Mesh | None = None,
                  where: str = "array") -> P:
  """The PartitionSpec of one array from its logical axis names.

  A logical name repeated within one array (a square `embed x embed`
  kernel) is sharded at its first occurrence only.

  Args:
    names: one logical name (or None) per dimension.
    rules: as accepted by `check_rules`.
    shape: the array's shape; with `mesh`, checked for divisibility.
    mesh: the mesh the spec is meant for.
    where: how errors name the array (a param path).

  Returns:
    A PartitionSpec with one entry per dimension.

  Raises:
    ValueError: two logical axes on one mesh axis, or an indivisible dim.
  """
  table = dict(check_rules(rules))
  used: dict[str, str] = {}
  spec = []
  for dim, name in enumerate(names):
    target = table.get(name) if name is not None else None
    if target is None or name in names[:dim]:
      spec.append(None)
      continue
    for axis in _target_axes(target):
      if axis in used:
        raise ValueError(
            f"{where}: sharding rules map logical axes {used[axis]!r} and "
            f"{name!r} of one array to the same mesh axis {axis!r}")
      used[axis] = name
    spec.append(target)
    if shape is not None and mesh is not None:
      _check_divisible(shape, dim, name, target, mesh, where)
  return P(*spec)


def _check_divisible(shape, dim, name, target, mesh, where):
  axes = _target_axes(target)
  parts = math.prod(mesh.shape[a] for a in axes)
  if shape[dim] % parts:
    raise ValueError(
        f"{where}: dimension {dim} ({name!r}, size {shape[dim]}) is not "
        f"divisible by mesh axis {'x'.join(axes)} of size {parts}; change the "
        "mesh or the rule for this axis")


def path_str(path) -> str:
  """A tree path as "a/b/c" (dict keys, attribute names, indices)."""
  parts = []
  for key in path:
    for attr in ("key", "name", "idx"):
      if hasattr(key, attr):
        parts.append(str(getattr(key, attr)))
        break
    else:
      parts.append(str(key))
  return "/".join(parts)


def _is_box(x) -> bool:
  return isinstance(x, nn.meta.AxisMetadata)


def logical_shardings(tree, mesh: jax.sharding.Mesh, rules) -> Any:
  """NamedShardings for a tree of (abstract) arrays with logical boxes.

  Args:
    tree: a pytree whose leaves are arrays or `jax.ShapeDtypeStruct`s,
      optionally wrapped in `nn.LogicallyPartitioned` (as `jax.eval_shape`
      of a Flax init or of `optax` init on boxed params returns). Unboxed
      leaves are replicated.
    mesh: the device mesh.
    rules: the logical -> mesh rules.

  Returns:
    A pytree shaped like `nn.meta.unbox(tree)` whose leaves are
    `NamedSharding`s.

  Raises:
    ValueError: naming the param path, for two logical axes on one mesh axis
      or a dimension its mesh axes do not divide.
  """
  rules = check_rules(rules)

  def one(path, leaf):
    if not _is_box(leaf):
      return NamedSharding(mesh, P())
    value, where = leaf.value, path_str(path)
    names = getattr(leaf, "names", ())
    if not isinstance(leaf, nn.LogicallyPartitioned):
      # Mesh axis names given directly (`nn.Partitioned`), used as they are.
      return NamedSharding(mesh, P(*names))
    if len(names) != len(value.shape):
      raise ValueError(f"{where}: {len(names)} logical axis names {names} "
                       f"for an array of shape {value.shape}")
    spec = mesh_axes_for(names, rules, value.shape, mesh, where)
    return NamedSharding(mesh, spec)

  return jax.tree_util.tree_map_with_path(one, tree, is_leaf=_is_box)


def batch_sharding(mesh: jax.sharding.Mesh, rules, ndim: int = 2
                   ) -> NamedSharding:
  """Sharding of a `[B, T, ...]` input array: `batch` on its rule's axes."""
  spec = mesh_axes_for(("batch",) + (None,) * (ndim - 1), rules)
  return NamedSharding(mesh, spec)


def batch_divisor(mesh: jax.sharding.Mesh, rules) -> int:
  """How many shards the global batch is cut into (it must divide B)."""
  target = dict(check_rules(rules)).get("batch")
  return math.prod(mesh.shape[a] for a in _target_axes(target))


def process_rows(mesh: jax.sharding.Mesh, rules, global_rows: int
                 ) -> list[int]:
  """The global batch rows this process's devices hold, in the order
  `jax.make_array_from_process_local_data` takes its local rows: the
  distinct row slices of its devices, sorted."""
  shard = batch_sharding(mesh, rules, ndim=1)
  slices = shard.addressable_devices_indices_map((global_rows,)).values()
  spans = sorted({s[0].indices(global_rows)[:2] for s in slices})
  return [r for start, stop in spans for r in range(start, stop)]


def shared_batch_shards(mesh: jax.sharding.Mesh, rules) -> list[tuple]:
  """Batch shards held by devices of more than one process.

  Each process feeds the rows of the batch shards its devices hold; a
  shard replicated over a mesh axis that crosses processes (a `tensor`
  axis spanning hosts) would be fed different rows by each. Returns
  `(shard index along the batch axes, process indices)` for every such
  shard; empty when each shard lives in one process.
  """
  batch_axes = _target_axes(dict(check_rules(rules)).get("batch"))
  names = list(mesh.axis_names)
  procs = np.vectorize(lambda d: d.process_index)(mesh.devices)
  order = [names.index(a) for a in batch_axes] + [
      i for i, a in enumerate(names) if a not in batch_axes]
  procs = np.transpose(procs, order)
  grid = procs.reshape(math.prod(procs.shape[:len(batch_axes)]) or 1, -1)
  return [(i, sorted(set(row.tolist()))) for i, row in enumerate(grid)
          if len(set(row.tolist())) > 1]


@contextlib.contextmanager
def activate(mesh: jax.sharding.Mesh, rules) -> Iterator[None]:
  """Makes `mesh` and `rules` current for activation constraints in models.

  Inside, `nn.with_logical_constraint(x, ("batch", "length", "embed"))`
  constrains `x`; outside, it is a no-op.
  """
  with jax.set_mesh(mesh), nn.logical_axis_rules(check_rules(rules)):
    yield


# The logical axes a kernel that XLA cannot partition is split on.
PER_DEVICE_AXES = ("batch", "heads")
# The logical names of an attention kernel's q, k, v and output [B, T, N, H].
ATTENTION_QKV = ("batch", None, "heads", None)


def per_device(fn: Callable[..., jax.Array], args: Sequence[jax.Array],
               names: Sequence[tuple], out_names: tuple) -> jax.Array:
  """fn(*args), each device computing its own rows and heads.

  For kernels XLA cannot partition (a Pallas or FFI call), which a sharded
  program would otherwise gather whole onto every device. Where a mesh of
  more than one device is active (`activate`), fn runs under `shard_map`
  on each device's slices: a dim named "batch" or "heads" is split over
  the mesh axes the active rules give it (kept whole where they do not
  divide it), every other dim is whole. Elsewhere fn runs on the arrays.

  Args:
    fn: (*local args) -> local output.
    args: its array arguments.
    names: per argument, a logical name (or None) per dim.
    out_names: the same for fn's output.

  Returns:
    fn's output, global.
  """
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or mesh.size == 1:
    return fn(*args)
  _, spec = _per_device_specs(mesh, args, names)
  return jax.shard_map(fn, mesh=mesh, in_specs=tuple(map(spec, names)),
                       out_specs=spec(out_names), check_vma=False)(*args)


def summed_per_device(fn: Callable[..., jax.Array],
                      args: Sequence[jax.Array],
                      names: Sequence[tuple]) -> jax.Array:
  """fn(*args) for an fn that sums over the dims named "batch" or "heads"
  (a weight gradient): each device sums its own slices, as `per_device`
  splits them, and the devices' sums are added (an all-reduce). The
  output is whole on every device. Where no mesh of more than one device
  is active, fn runs on the arrays.
  """
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or mesh.size == 1:
    return fn(*args)
  split, spec = _per_device_specs(mesh, args, names)
  axes = tuple(a for group in split.values() for a in group)
  local = lambda *a: jax.lax.psum(fn(*a), axes) if axes else fn(*a)  # pylint: disable=unnecessary-lambda-assignment
  return jax.shard_map(local, mesh=mesh, in_specs=tuple(map(spec, names)),
                       out_specs=P(), check_vma=False)(*args)


def splits_only_batch() -> bool:
  """Whether the active mesh, if any, splits nothing but the batch: each
  of its axes of more than one device is one the active rules give
  "batch" (data parallelism, FSDP's included)."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return True
  batch = _target_axes(dict(nn.get_logical_axis_rules()).get("batch"))
  return all(size == 1 or name in batch for name, size in mesh.shape.items())


def _per_device_specs(mesh, args, names) -> tuple[dict, Callable]:
  """`per_device`'s split: {logical name: the mesh axes its dims split
  over} (those the active rules give it, where they divide the dim, else
  it stays whole), and the PartitionSpec of a tuple of logical names."""
  table = dict(nn.get_logical_axis_rules())
  sizes = {name: x.shape[d] for x, dims in zip(args, names)
           for d, name in enumerate(dims) if name in PER_DEVICE_AXES}
  split, taken = {}, set()
  for name, size in sizes.items():
    axes = tuple(a for a in _target_axes(table.get(name))
                 if a in mesh.shape and a not in taken)
    if axes and size % math.prod(mesh.shape[a] for a in axes) == 0:
      split[name] = axes
      taken.update(axes)
  return split, lambda dims: P(*(split.get(name) for name in dims))


def unbox(tree):
  """The tree with every logical box replaced by its value (no constraint)."""
  return jax.tree_util.tree_map(
      lambda x: (x.value if hasattr(x, "value") else x.unbox()) if _is_box(x)
      else x, tree,
      is_leaf=_is_box)


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
  """The fully replicated sharding on `mesh`."""
  return NamedSharding(mesh, P())

