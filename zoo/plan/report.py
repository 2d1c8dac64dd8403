"""A compiled plan's figures, its roofline, and how it prints."""

import dataclasses
import json

from zoo.plan.chips import Chip, GiB


class PlanDoesNotFit(ValueError):
  """The compiled step needs more HBM per chip than the chip has."""


@dataclasses.dataclass
class Plan:
  """What one chip of the pod needs for one training step.

  Bytes are per chip, from the TPU compiler's memory analysis;
  `bytes_accessed` and `compiled_flops` from its cost analysis of the
  per-chip program (which counts a loop body once); `flops` is the step's
  matmul FLOPs from its jaxpr (`zoo.plan.flops`, scans counted in full)
  over the chips; `collectives` from the optimized HLO
  (`zoo.plan.hlo.collectives`).
  """
  topology: str
  num_slices: int
  chip: Chip
  chips: int
  hosts: int
  mesh: dict
  dtype: str
  model: str
  size: str
  objective: str
  batch_size: int
  seq_len: int
  compile_s: float
  param_bytes: int
  opt_bytes: int
  argument_bytes: int
  output_bytes: int
  alias_bytes: int
  temp_bytes: int
  code_bytes: int
  flops: float
  compiled_flops: float
  bytes_accessed: float
  collectives: dict
  largest_state: list
  largest_values: list
  loops: int = 0  # while loops that run more than once (scanned layers)

  @property
  def total_bytes(self) -> int:
    """Peak HBM of the step: live arguments, outputs not aliased to a
    donated argument, temporaries and the program itself."""
    return (self.argument_bytes + self.output_bytes - self.alias_bytes
            + self.temp_bytes + self.code_bytes)

  @property
  def fits(self) -> bool:
    return self.total_bytes <= self.chip.hbm_bytes

  @classmethod
  def from_dict(cls, d: dict) -> "Plan":
    """The Plan `to_dict` wrote (its derived fields recomputed)."""
    from zoo.plan.chips import CHIPS  # pylint: disable=import-outside-toplevel
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in names and k != "chip"},
               chip=CHIPS[d["chip"]])

  def roofline(self) -> dict:
    """Lower bounds on the step time from the chip's published figures.

    compute: model FLOPs at the bf16 peak; hbm: the compiler's bytes
    accessed at the HBM bandwidth (a loop body counted once: for scanned
    layers a lower bound); ici: bytes each chip sends at half its bidirectional ICI
    bandwidth; dcn: bytes over the data-center network. With perfect
    overlap the step takes the largest; `mfu` is the compute time's share
    of it (the jaxpr's matmuls, so recomputation under remat counts).
    """
    sent = sum(c["bytes"] - c["dcn_bytes"] for c in self.collectives.values())
    dcn = sum(c["dcn_bytes"] for c in self.collectives.values())
    times = {"compute": self.flops / self.chip.peak_flops,
             "hbm": self.bytes_accessed / self.chip.hbm_bw,
             "ici": sent / (self.chip.ici_bw / 2),
             "dcn": dcn / self.chip.dcn_bw}
    bound = max(times, key=times.get)
    step = max(times[bound], 1e-12)
    tokens = self.batch_size * self.seq_len / self.chips
    return {**{f"{k}_s": v for k, v in times.items()}, "step_s": step,
            "bound": bound, "mfu": times["compute"] / step,
            "tokens_per_s_per_chip": tokens / step}

  def to_dict(self) -> dict:
    out = dataclasses.asdict(self)
    out["chip"] = self.chip.name
    out.update(total_bytes=self.total_bytes, fits=self.fits,
               hbm_bytes=self.chip.hbm_bytes, roofline=self.roofline())
    return out

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=1)

  def check(self) -> None:
    """Raises PlanDoesNotFit naming the largest buffers when over HBM."""
    if self.fits:
      return
    state = ", ".join(f"{v['name']} {_gib(v['bytes'])}"
                      for v in self.largest_state[:3])
    values = ", ".join(f"{v['type']} from {v['op']} ({_gib(v['bytes'])})"
                       for v in self.largest_values[:3])
    raise PlanDoesNotFit(
        f"the step needs {_gib(self.total_bytes)} per chip but a "
        f"{self.chip.name} chip has {_gib(self.chip.hbm_bytes)} of HBM: "
        f"state {_gib(self.argument_bytes)} (largest: {state}), "
        f"temporaries {_gib(self.temp_bytes)} (largest: {values}). Shard "
        "the state further (mesh fsdp), split the batch (microbatches), or "
        "use more chips")

  def report(self) -> str:
    """The plan as a table for the terminal."""
    hbm, r = self.chip.hbm_bytes, self.roofline()
    mesh = " x ".join(f"{k} {v}" for k, v in self.mesh.items())
    slices = f" x {self.num_slices} slices" if self.num_slices > 1 else ""
    lines = [
        f"{self.model} {self.size} ({self.objective}), batch "
        f"{self.batch_size} x {self.seq_len}, {self.dtype} compute",
        f"on {self.topology}{slices}: {self.chips} chips, {self.hosts} "
        f"hosts, mesh {mesh}; compiled in {self.compile_s:.1f} s",
        "",
        f"per chip                      GiB   (HBM {_gib(hbm)})",
        f"  parameters           {self.param_bytes / GiB:10.3f}",
        f"  optimizer state      {self.opt_bytes / GiB:10.3f}",
        f"  arguments (all)      {self.argument_bytes / GiB:10.3f}",
        f"  temporaries          {self.temp_bytes / GiB:10.3f}",
        f"  total                {self.total_bytes / GiB:10.3f}   "
        f"{100 * self.total_bytes / hbm:5.1f}% of HBM: "
        f"{'fits' if self.fits else 'DOES NOT FIT'}",
        "",
        f"per step per chip: {self.flops / 1e12:.4g} TFLOP of matmuls "
        f"(compiler: {self.compiled_flops / 1e12:.4g}, loop bodies once), "
        f"{self.bytes_accessed / 1e9:.4g} GB of HBM traffic"
        + (" (loop bodies once: a lower bound)" if self.loops else ""),
        "collectives per step      count    MB sent    of it over DCN",
    ]
    for kind, c in sorted(self.collectives.items()):
      lines.append(f"  {kind:20s} {c['count']:8d} {c['bytes'] / 1e6:10.2f} "
                   f"{c['dcn_bytes'] / 1e6:14.2f}")
    if not self.collectives:
      lines.append("  none")
    lines += [
        "",
        f"roofline ({self.chip.name}: {self.chip.peak_flops / 1e12:.0f} "
        f"TFLOP/s bf16, {self.chip.hbm_bw / 1e9:.0f} GB/s HBM, "
        f"{self.chip.ici_bw / 1e9:.0f} GB/s ICI)",
        f"  compute {_ms(r['compute_s'])}, HBM {_ms(r['hbm_s'])}, ICI "
        f"{_ms(r['ici_s'])}, DCN {_ms(r['dcn_s'])}",
        f"  step >= {_ms(r['step_s'])} ({r['bound']}-bound), MFU <= "
        f"{r['mfu']:.2f}, {r['tokens_per_s_per_chip']:,.0f} tokens/s per "
        "chip"]
    return "\n".join(lines)


def _gib(n: float) -> str:
  return f"{n / GiB:.2f} GiB"


def _ms(s: float) -> str:
  return f"{s * 1e3:.3g} ms"
