"""Where a harness run's time went: seconds per stage, and of them compiling."""


def of(records: list[dict], floors: dict) -> dict:
  """Seconds per stage (pre-training, each view, floors) over all cells,
  and under "compile" the seconds of each stage spent compiling."""
  out, compiling = {}, {}
  for rec in records:
    for stage, seconds in rec["seconds"].items():
      out[stage] = round(out.get(stage, 0.0) + float(seconds), 1)
    for stage, seconds in rec.get("compile_seconds", {}).items():
      compiling[stage] = round(compiling.get(stage, 0.0) + float(seconds), 1)
  out["floors"] = round(float(floors.get("seconds", 0.0)), 1)
  out["compile"] = compiling
  return out


def line(profile: dict, views: tuple[str, ...]) -> str:
  """`Time spent: pretrain 300 s (compiling 20 s), ...`, in stage order."""
  compiling = profile.get("compile") or {}
  parts = []
  for stage in ("pretrain",) + tuple(views) + ("floors",):
    if stage in profile:
      text = f"{stage} {profile[stage]:.0f} s"
      if compiling.get(stage):
        text += f" (compiling {compiling[stage]:.0f} s)"
      parts.append(text)
  total = sum(compiling.values())
  tail = f"; {total:.0f} s of it compiling" if compiling else ""
  side = profile.get("side_by_side")
  if side:
    tail += (f"; the last invocation ran its cells in {side['workers']} "
             f"worker processes side by side for {side['seconds']:.0f} s of "
             "wall time (the stages' seconds add up over the workers, and "
             "over earlier invocations of a resumed grid)")
  return f"Time spent: {', '.join(parts)}{tail}."
