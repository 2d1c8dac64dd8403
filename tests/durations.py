"""Each test file's seconds in a `make test` run, and the order that makes.

`make test` runs files whole on two workers (`--dist loadfile`), handing a
worker its next file as it finishes one. Dealt in xdist's own order (most
tests first), the few files of whole harness runs come last, and one
worker ends minutes after the other. `conftest.py` deals the longest
files first instead (`longest_first`), so the last files are short ones.

The seconds are a past run's (`durations.json`); a file it lacks counts
as the median file. Refresh them after adding or growing a long test:

    make test-durations             # the suite with --durations=0, then:
    python tests/durations.py LOG   # durations.json from such a log
"""

import json
import pathlib
import re
import statistics
import sys

FILE = pathlib.Path(__file__).with_name("durations.json")
_LINE = re.compile(r"^([\d.]+)s\s+(?:setup|call|teardown)\s+(\S+?)::", re.M)


def parse(log: str) -> dict[str, float]:
  """Seconds per test file (setup, call and teardown summed) of a pytest
  log with `--durations=0`; paths as pytest names them."""
  out: dict[str, float] = {}
  for seconds, path in _LINE.findall(log):
    out[path] = out.get(path, 0.0) + float(seconds)
  return out


def load(path: pathlib.Path = FILE) -> dict[str, float]:
  """The recorded seconds per file ({} when there is no record)."""
  if not path.exists():
    return {}
  return json.loads(path.read_text(encoding="utf-8"))


def longest_first(paths: list[str], seconds: dict[str, float]
                  ) -> list[int]:
  """Indices that order `paths` (one per test) by their file's seconds,
  longest first, keeping the tests of a file in their order; a file
  without a record counts as the median."""
  default = statistics.median(seconds.values()) if seconds else 0.0
  return sorted(range(len(paths)),
                key=lambda i: -seconds.get(paths[i], default))


def main(argv: list[str]) -> None:
  if len(argv) != 2:
    raise SystemExit("usage: python tests/durations.py LOG")
  found = parse(pathlib.Path(argv[1]).read_text(encoding="utf-8"))
  if not found:
    raise SystemExit(f"{argv[1]} lists no durations: run pytest with "
                     "--durations=0")
  FILE.write_text(json.dumps({k: round(v, 1) for k, v in
                              sorted(found.items())}, indent=1) + "\n",
                  encoding="utf-8")
  print(f"{FILE}: {len(found)} files, {sum(found.values()):.0f} s")


if __name__ == "__main__":
  main(sys.argv)
