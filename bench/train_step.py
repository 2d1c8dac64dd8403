"""One full training step, the zoo against Hugging Face PyTorch, side by side.

    python bench/train_step.py [--models bert-base,gpt2-small,t5-small]
        [--batch 8] [--seq_len 128] [--steps 5] [--warmup 2] [--settle 1]
        [--zoo_dtypes float32,bfloat16] [--hf_modes float32,bfloat16] [--no_hf]
        [--zoo_cpu_devices 1,2]

For each model: tokens/s of forward + backward + AdamW update of
- the zoo: the real objective (MLM, CLM, T5 span corruption) and the one
  trainer's jitted, donated step (`zoo.train_lib.make_train_step`), in
  float32 and in bfloat16 compute (bf16 matmul inputs, f32 accumulation);
- with `--zoo_cpu_devices 1,2`, the zoo's step also data-parallel over 2
  CPU devices of one process (`JAX_NUM_CPU_DEVICES=2`; the mesh's `data`
  axis takes them, each device runs half the rows and the gradient is
  all-reduced in memory), the run named `zoo_<dtype>_x2`;
- transformers' PyTorch model of the same configuration with
  `torch.optim.AdamW`, in float32 and under `torch.autocast("cpu",
  bfloat16)`.
Both run with dropout on (training mode) and the same thread count; the
reference with glibc's default allocator, the zoo with the settings
`import zoo` makes (`zoo.host_memory`; `--hf_host_malloc` gives them to
the reference too). Each
run of a model gets its own worker process; all are compiled and warmed up
first, then they take turns (an untimed step, then a timed one, each;
`--steps` rounds), so a drift in the machine's speed (a shared host)
falls on both sides of every ratio.
MFU divides model FLOPs (3 x XLA's count of the zoo's forward loss) by the
measured matmul peak: f32 runs by the f32 peak, bf16 runs by the bf16 one.

Tokens are encoder input tokens (B x T); T5 also runs its decoder on the
span-corruption targets, counted in the FLOPs but not the tokens.

The last line prints the ratios of zoo tokens/s (best dtype) to HF's, e.g.
`bert-base zoo/hf_f32=2.10 zoo/hf_bf16=1.45 | gpt2-small ... | t5-small ...`.
"""

import argparse
import sys

import _common  # pylint: disable=g-bad-import-order
import _workers  # pylint: disable=g-bad-import-order
import _zoo  # pylint: disable=g-bad-import-order

_hf = None  # the PyTorch reference, imported only when it runs

MODELS = ("bert-base", "gpt2-small", "t5-small")


def parse_args(argv):
  """The command line."""
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--models", default=",".join(MODELS))
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--steps", type=int, default=5)
  p.add_argument("--warmup", type=int, default=2)
  p.add_argument("--settle", type=int, default=1,
                 help="untimed steps at the start of each run's turn")
  p.add_argument("--zoo_dtypes", default="float32,bfloat16")
  p.add_argument("--zoo_cpu_devices", default="1",
                 help="CPU device counts of the zoo's runs (JAX_NUM_CPU_"
                      "DEVICES; the step is data-parallel over them)")
  p.add_argument("--size", default="",
                 help="override every model's size (e.g. tiny, for a dry run)")
  p.add_argument("--hf_modes", default="float32,bfloat16",
                 help="reference runs: float32 and/or bfloat16 (autocast)")
  p.add_argument("--no_hf", action="store_true",
                 help="zoo only (the GPU script has no PyTorch reference)")
  p.add_argument("--peak_n", type=int, default=2048)
  p.add_argument("--peak_tflops", type=float, default=0.0,
                 help="MFU denominator for bf16 (e.g. a GPU's nominal dense "
                      "bf16 peak); 0: the measured matmul peak")
  p.add_argument("--attention_impl", default="auto",
                 help="the models' attention_impl (see layers.attention)")
  p.add_argument("--no_attention_dropout", action="store_true",
                 help="zoo only: no dropout on attention probabilities, "
                      "which fused kernels need (dropout forces einsum)")
  p.add_argument("--scan_layers", action="store_true")
  p.add_argument("--hf_host_malloc", action="store_true",
                 help="give the reference the zoo's allocator settings "
                      "(zoo.host_memory); by default it runs with glibc's")
  args = p.parse_args(argv)
  args.models = [m for m in args.models.split(",") if m]
  unknown = sorted(set(args.models) - set(_zoo.SPECS))
  if unknown:
    p.error(f"unknown models {unknown}; known: {sorted(_zoo.SPECS)}")
  args.zoo_dtypes = [d for d in args.zoo_dtypes.split(",") if d]
  args.hf_modes = [m for m in args.hf_modes.split(",") if m]
  try:
    args.zoo_cpu_devices = [int(n) for n in args.zoo_cpu_devices.split(",")
                            if n]
  except ValueError:
    p.error(f"--zoo_cpu_devices {args.zoo_cpu_devices!r}: counts, e.g. 1,2")
  if not args.zoo_cpu_devices or min(args.zoo_cpu_devices) < 1:
    p.error("--zoo_cpu_devices needs counts of at least 1")
  bad = sorted(set(args.zoo_dtypes + args.hf_modes) - {"float32", "bfloat16"})
  if bad:
    p.error(f"dtypes {bad} are not float32 or bfloat16")
  return args


def run_model(name, args, peaks):
  """Timings of one model: {"zoo_<dtype>": {...}, "hf_<mode>": {...}}.

  With more than one run, each run lives in its own worker process
  (`_workers`), built and warmed up first; then they take turns
  (`_common.interleaved_medians`), so the ratios compare steps taken under
  the same host load and neither framework's memory disturbs the other. A
  lone run (the GPU script's) is timed in this process.
  """
  tokens = args.batch * args.seq_len
  spec = {"name": name, "batch": args.batch, "seq_len": args.seq_len,
          "size": args.size or None,
          "model_args": _zoo.speed_args(name, args.attention_impl,
                                        args.scan_layers,
                                        not args.no_attention_dropout)}
  runs = [("zoo", d, n) for d in args.zoo_dtypes
          for n in args.zoo_cpu_devices]
  runs += [] if args.no_hf else [("hf", m, 1) for m in args.hf_modes]
  warmup = max(args.warmup, 1)
  if len(runs) == 1 and runs[0][2] == 1:
    fn, flops, _ = _zoo.prepare_step(name, runs[0][1], args.batch,
                                     args.seq_len, spec["size"],
                                     spec["model_args"])
    seconds = {f"zoo_{runs[0][1]}": _common.median_seconds(fn, args.steps,
                                                           warmup)}
  else:
    workers = []
    try:
      for kind, dtype, devices in runs:
        workers.append(_workers.Worker(
            kind, dict(spec, dtype=dtype, env=_env(kind, devices, args)),
            warmup, run_label(kind, dtype, devices)))
      # One FLOP count per model: the first zoo run's (bf16 adds casts).
      flops = workers[0].info["flops"]
      seconds = _common.interleaved_medians(_workers.steppers(workers),
                                            args.steps, 0, args.settle)
    finally:
      for w in workers:
        w.close()
  return {key: _row(s, tokens, flops, peaks[key.split("_")[1]])
          for key, s in seconds.items()}


def run_label(kind: str, dtype: str, devices: int) -> str:
  """`zoo_float32`, `zoo_float32_x2` (2 CPU devices), `hf_bfloat16`."""
  return f"{kind}_{dtype}" + (f"_x{devices}" if devices > 1 else "")


def _env(kind: str, devices: int, args) -> dict[str, str]:
  """A run's environment: the zoo's CPU devices, the reference's malloc."""
  if kind == "zoo":
    return {"JAX_NUM_CPU_DEVICES": str(devices)} if devices > 1 else {}
  return {} if args.hf_host_malloc else {"ZOO_HOST_MALLOC": "0"}


def _row(seconds, tokens, flops, peak):
  return {"step_s": seconds, "tokens_per_s": tokens / seconds,
          "model_tflops_per_step": flops / 1e12,
          "mfu": flops / seconds / peak}


def ratio_line(results) -> str:
  """`name zoo/hf_f32=x zoo/hf_bf16=y | ...` with the zoo's best dtype."""
  parts = []
  for name, rows in results.items():
    zoo = max(r["tokens_per_s"] for k, r in rows.items()
              if k.startswith("zoo_"))
    text = name
    for mode, short in (("float32", "f32"), ("bfloat16", "bf16")):
      if f"hf_{mode}" in rows:
        text += f" zoo/hf_{short}={zoo / rows[f'hf_{mode}']['tokens_per_s']:.2f}"
    if "hf_float32" not in rows:
      text += f" zoo_mfu={max(r['mfu'] for r in rows.values()):.3f}"
    parts.append(text)
  return " | ".join(parts)


def main(argv=None):
  """Runs the benchmark and prints a table, a JSON line and the ratios."""
  args = parse_args(sys.argv[1:] if argv is None else argv)
  info = _common.machine()
  if not args.no_hf:
    global _hf  # pylint: disable=global-statement
    import _hf  # pylint: disable=g-import-not-at-top,import-outside-toplevel,redefined-outer-name
    info.update(_hf.versions())
  peaks = {d: _common.matmul_peak(d, args.peak_n) for d in
           ("float32", "bfloat16")}
  info["measured_peaks_flops"] = dict(peaks)
  if args.peak_tflops > 0:
    peaks["bfloat16"] = args.peak_tflops * 1e12
  print(f"machine {info}")
  measured = info["measured_peaks_flops"]
  print(f"measured matmul peak f32={measured['float32'] / 1e9:.0f} GFLOP/s "
        f"bf16(f32 acc)={measured['bfloat16'] / 1e9:.0f} GFLOP/s; MFU "
        f"denominators f32={peaks['float32'] / 1e9:.0f} "
        f"bf16={peaks['bfloat16'] / 1e9:.0f} GFLOP/s", flush=True)
  results = {}
  for name in args.models:
    results[name] = run_model(name, args, peaks)
    for key, row in results[name].items():
      print(f"{name:11s} {key:13s} step {row['step_s'] * 1e3:8.1f} ms  "
            f"{row['tokens_per_s']:9.0f} tok/s  MFU {row['mfu']:.3f}",
            flush=True)
    # Cumulative after every model, so a cut-short run still reports.
    info["load_avg_1m_end"] = _common.machine()["load_avg_1m"]
    _emit(args, info, peaks, results)
  if results:
    _final_peaks(args, info, peaks, results)
  print(ratio_line(results))


def _final_peaks(args, info, peaks, results):
  """Re-measures the matmul peak; MFU by the faster of the two measurements.

  On a shared host the peak measured at the start can be low (another
  tenant's load), which inflates every MFU; the best of two measurements,
  minutes apart, is the closer denominator. Emits the final JSON record.
  """
  for dtype in ("float32", "bfloat16"):
    again = _common.matmul_peak(dtype, args.peak_n)
    info["measured_peaks_flops"][dtype] = max(
        info["measured_peaks_flops"][dtype], again)
    if not (dtype == "bfloat16" and args.peak_tflops > 0):
      peaks[dtype] = max(peaks[dtype], again)
  tokens = args.batch * args.seq_len
  for rows in results.values():
    for key, row in rows.items():
      rows[key] = _row(row["step_s"], tokens,
                       row["model_tflops_per_step"] * 1e12,
                       peaks[key.split("_")[1]])
  print(f"matmul peak, best of start and end: f32="
        f"{peaks['float32'] / 1e9:.0f} GFLOP/s; MFU: " + ", ".join(
            f"{n} {k} {r['mfu']:.3f}" for n, rows in results.items()
            for k, r in rows.items()), flush=True)
  _emit(args, info, peaks, results)


def _emit(args, info, peaks, results):
  """The run's JSON record so far (`bench/report.py` reads the last one)."""
  _common.emit_json("train_step", {
      "machine": info, "peaks_flops": peaks, "batch": args.batch,
      "size": args.size or None, "hf_host_malloc": args.hf_host_malloc,
      "seq_len": args.seq_len, "steps": args.steps, "results": results})


if __name__ == "__main__":
  main()
