"""The parallel sample: sentence pairs laid out like C4, for CoVe.

    python -m data.parallel [--dir DIR]

builds, once, under `<data_dir()>/parallel`:
  c4/      c4-{train,validation}.NNNNN-of-NNNNN.json.gz, one pair per
           record: the source sentence, a newline, its translation
  BUILT    a stamp naming the build; present = nothing to do

The pairs are `sources.bible_pairs()`: English (World English Bible) into
French (Louis Segond 1910), both public domain, verse-aligned, each side
one sentence. 5% of pairs, by a hash of the verse, form the validation
split. The rows read them with the embedded sample's tokenizer
(`data.source = "parallel"`), so a model pre-trained on them shares the
vocabulary the harness evaluates with.
"""

import argparse
import hashlib
import pathlib

from data import c4
from data import config
from data import sources

VERSION = "1"
_TIMESTAMP = "2019-04-01T00:00:00Z"


def default_dir() -> pathlib.Path:
  """`<data_dir()>/parallel`."""
  return config.data_dir() / "parallel"


def records(pairs: list[dict]) -> dict[str, list[dict]]:
  """C4-schema records of the pairs, by split."""
  out = {"train": [], "validation": []}
  for pair in pairs:
    key = f"bible://en-fr/{pair['id']}"
    h = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)
    out["validation" if h % 20 == 0 else "train"].append(dict(
        text=f"{pair['source']}\n{pair['target']}", url=key,
        timestamp=_TIMESTAMP))
  return out


def build(folder=None) -> pathlib.Path:
  """Builds the parallel sample into `folder` unless it is built."""
  return c4.build_once(folder or default_dir(), VERSION,
                       lambda: records(sources.bible_pairs()), "pairs")



def main(argv=None) -> None:
  """`python -m data.parallel`: builds the parallel sample."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--dir", default=None,
                      help="default: <data_dir>/parallel")
  folder = build(parser.parse_args(argv).dir)
  print(f"parallel sample ready at {folder}: {(folder / 'BUILT').read_text()}")


if __name__ == "__main__":
  main()
