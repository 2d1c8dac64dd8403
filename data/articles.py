"""The article sample: the BBC articles as fields, laid out like C4, for
Grover.

    python -m data.articles [--dir DIR]

builds, once, under `<data_dir()>/articles`:
  c4/      c4-{train,validation}.NNNNN-of-NNNNN.json.gz, one article per
           record: its topic, a newline, its headline, a newline, its body
  BUILT    a stamp naming the build; present = nothing to do

The articles are `sources.bbc_articles()` in their own splits (the
sample's: an article a downstream task evaluates on is never trained on;
its "test" bucket is left out). Rows read them with the embedded sample's
tokenizer (`data.source = "articles"`): each field is wrapped in its own
begin and end markers (`markers`) and its pieces carry its field id
(`field_ids`: 1 topic, 2 headline, 3 body), which Grover's scheme lays out
(`objectives.fields`).
"""

import argparse
import pathlib

from data import c4
from data import config
from data import sources

VERSION = "1"
FIELDS = ("topic", "headline", "body")  # field ids 1, 2, 3, in this order
_TIMESTAMP = "2019-04-01T00:00:00Z"


def default_dir() -> pathlib.Path:
  """`<data_dir()>/articles`."""
  return config.data_dir() / "articles"


def markers(specials: dict) -> list[tuple[int, int]]:
  """(begin, end) ids of each field, in `FIELDS` order: sentinels 0, 1
  (topic), 2, 3 (headline), 4, 5 (body) of a tokenizer's `specials()`."""
  top = specials["sentinel0"]
  return [(top - 2 * i, top - 2 * i - 1) for i in range(len(FIELDS))]


def text_of(article: dict) -> str:
  """A record's text: one line per field, the body's paragraphs after."""
  return "\n".join(article[f] for f in FIELDS)


def records(articles) -> dict[str, list[dict]]:
  """C4-schema records of the articles of the train and validation
  buckets."""
  out = {"train": [], "validation": []}
  for a in articles:
    if a["split"] in out:
      out[a["split"]].append(dict(text=text_of(a), url=f"bbc://{a['id']}",
                                  timestamp=_TIMESTAMP))
  return out


def build(folder=None) -> pathlib.Path:
  """Builds the article sample into `folder` unless it is built."""
  return c4.build_once(folder or default_dir(), VERSION,
                       lambda: records(sources.bbc_articles()), "articles")



def main(argv=None) -> None:
  """`python -m data.articles`: builds the article sample."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--dir", default=None,
                      help="default: <data_dir>/articles")
  folder = build(parser.parse_args(argv).dir)
  print(f"article sample ready at {folder}: {(folder / 'BUILT').read_text()}")


if __name__ == "__main__":
  main()
