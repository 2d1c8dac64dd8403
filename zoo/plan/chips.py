"""Chips a plan targets: published per-chip figures, and TPU topologies.

Figures are the vendors' published per-chip numbers (Cloud TPU system
architecture pages; NVIDIA H100/H200 SXM data sheets, dense bf16):

  peak_flops  bf16 FLOP/s;
  hbm_bytes   HBM capacity;
  hbm_bw      HBM bytes/s;
  ici_bw      bidirectional chip-to-chip bytes/s (ICI; NVLink on GPUs);
  dcn_bw      data-center network bytes/s per chip (between slices): the
              pod's published DCN bandwidth over its chips, or the per-chip
              figure where one is published.

TPU topologies compile here, on a CPU, with libtpu installed; the GPUs are
for the roofline only (`roofline_only`).
"""

import dataclasses
import os
import re

GiB = 1024 ** 3


@dataclasses.dataclass(frozen=True)
class Chip:
  """One accelerator's published figures (see the module docstring)."""
  name: str
  peak_flops: float
  hbm_bytes: float
  hbm_bw: float
  ici_bw: float
  dcn_bw: float
  device_kind: str = ""     # what jax reports as `device.device_kind`
  chip_config: str = "default"  # libtpu's chip config: one device a chip
  roofline_only: bool = False


CHIPS = {
    "v4": Chip("v4", 275e12, 32 * GiB, 1200e9, 300e9, 6.25e9,
               "TPU v4", chip_config="megacore"),
    "v5e": Chip("v5e", 197e12, 16 * GiB, 819e9, 400e9, 6.4e12 / 8 / 256,
                "TPU v5 lite"),
    "v5p": Chip("v5p", 459e12, 95 * GiB, 2765e9, 1200e9, 50e9 / 8,
                "TPU v5"),
    "v6e": Chip("v6e", 918e12, 32 * GiB, 1638e9, 800e9, 6.4e12 / 8 / 256,
                "TPU v6 lite"),
    "h100": Chip("h100", 989e12, 80e9, 3.35e12, 900e9, 50e9,
                 "NVIDIA H100 80GB HBM3", roofline_only=True),
    "h200": Chip("h200", 989e12, 141e9, 4.8e12, 900e9, 50e9,
                 "NVIDIA H200", roofline_only=True),
}

_TOPOLOGY = re.compile(r"^(?P<chip>[a-z0-9]+):(?P<shape>\d+(x\d+){1,2})$")


def parse_topology(name: str) -> tuple[Chip, tuple[int, ...]]:
  """`"v5p:4x4x4"` -> (the v5p Chip, (4, 4, 4)).

  Raises:
    ValueError: a malformed name, an unknown chip, or a GPU (which has no
      topology to compile for here).
  """
  match = _TOPOLOGY.match(name.strip().lower())
  if not match:
    raise ValueError(f"topology {name!r} is not CHIP:AxB or CHIP:AxBxC, "
                     f"e.g. v5e:4x4 or v5p:4x4x4; chips: {sorted(CHIPS)}")
  chip = CHIPS.get(match["chip"])
  if chip is None:
    raise ValueError(f"unknown chip {match['chip']!r} in topology {name!r}; "
                     f"chips: {sorted(CHIPS)}")
  if chip.roofline_only:
    raise ValueError(f"{chip.name} figures serve the roofline only; plans "
                     "compile for TPU topologies (v4, v5e, v5p, v6e)")
  return chip, tuple(int(x) for x in match["shape"].split("x"))


def host_bounds(shape: tuple[int, ...]) -> tuple[int, int, int]:
  """Chips per host as libtpu's `chips_per_host_bounds`: a 2x2 block of
  chips per host, as Cloud TPU hosts of 4 chips hold them (fewer on
  smaller slices)."""
  return (min(2, shape[0]), min(2, shape[1]) if len(shape) > 1 else 1, 1)


def devices(topology: str, num_slices: int = 1) -> tuple[Chip, list]:
  """The TPU devices of `num_slices` slices of `topology`, for AOT compiles.

  Needs libtpu; runs on a CPU-only host (no TPU is touched).

  Raises:
    ValueError: a bad topology name or slice count.
    RuntimeError: libtpu is missing or refuses the topology.
  """
  chip, shape = parse_topology(topology)
  if num_slices < 1:
    raise ValueError(f"num_slices must be >= 1, got {num_slices}")
  # No TPU is opened: skip the metadata server, let other processes (tests,
  # a second plan) load libtpu at the same time, and give libtpu's start-up
  # the host facts it would otherwise complain about (the topology itself
  # comes from the arguments below).
  for key, value in (("TPU_SKIP_MDS_QUERY", "1"),
                     ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1"),
                     ("TPU_WORKER_HOSTNAMES", "localhost"),
                     ("TPU_ACCELERATOR_TYPE", "v5litepod-4")):
    os.environ.setdefault(key, value)
  from jax.experimental import topologies  # pylint: disable=import-outside-toplevel
  try:
    desc = topologies.get_topology_desc(
        platform="tpu", topology_name=f"{chip.name}:{'x'.join(map(str, shape))}",
        chip_config_name=chip.chip_config,
        chips_per_host_bounds=host_bounds(shape), num_slices=num_slices)
  except Exception as e:  # pylint: disable=broad-except
    raise RuntimeError(
        f"libtpu could not describe topology {topology!r} x {num_slices} "
        f"slice(s): {e}. Plans need libtpu (pip install 'jax[tpu]', "
        "or the test extra)") from e
  return chip, list(desc.devices)


def of_device(device) -> Chip | None:
  """The Chip a jax device is, by its `device_kind`; None for a CPU or an
  accelerator without published figures here."""
  kind = getattr(device, "device_kind", "") or ""
  for chip in CHIPS.values():
    if kind == chip.device_kind or (chip.roofline_only and kind.startswith(
        chip.device_kind.split(" 80GB")[0])):
      return chip
  return None
