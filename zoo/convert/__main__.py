"""Hugging Face export and import from the command line.

    python -m zoo.convert --to hf WORKDIR OUT [--step N]
    python -m zoo.convert --from hf FOLDER OUT_WORKDIR [--objective NAME]

`--to hf` writes a workdir's model (its latest complete checkpoint, or
`--step`) with its tokenizer as a folder transformers loads offline
(`zoo.convert.to_hf`). `--from hf` turns a Hugging Face folder into a
workdir at step 0 that `zoo.train` continues
(`--config configs/workdir.py:OUT_WORKDIR --workdir OUT_WORKDIR`) and
fine-tuning loads (`zoo.convert.workdir.hf_to_workdir`).
"""

import argparse
import sys


def parse(argv: list[str]) -> argparse.Namespace:
  """The command line, checked: exactly one of --to / --from, "hf" only."""
  p = argparse.ArgumentParser(prog="python -m zoo.convert",
                              description=__doc__.split("\n\n")[0])
  way = p.add_mutually_exclusive_group(required=True)
  way.add_argument("--to", choices=["hf"], help="export a workdir")
  way.add_argument("--from", dest="from_", choices=["hf"],
                   help="import a Hugging Face folder as a workdir")
  p.add_argument("source", help="WORKDIR (--to) or Hugging Face FOLDER "
                 "(--from)")
  p.add_argument("out", help="OUT folder (--to) or OUT_WORKDIR (--from)")
  p.add_argument("--step", type=int, default=None,
                 help="--to: the checkpoint to export (default: latest)")
  p.add_argument("--objective", default=None,
                 help="--from: the scheme the workdir trains (default: the "
                 "family's own)")
  args = p.parse_args(argv)
  if args.to and args.objective:
    p.error("--objective applies to --from hf")
  if args.from_ and args.step is not None:
    p.error("--step applies to --to hf")
  return args


def main(argv: list[str] | None = None) -> None:
  """Runs one conversion and prints where it wrote."""
  args = parse(sys.argv[1:] if argv is None else argv)
  if args.to:
    from zoo.convert import export  # pylint: disable=import-outside-toplevel
    out = export.to_hf(args.source, args.out, step=args.step)
  else:
    from zoo.convert import workdir  # pylint: disable=import-outside-toplevel
    out = workdir.hf_to_workdir(args.source, args.out,
                                objective=args.objective)
  print(out)


if __name__ == "__main__":
  main()
