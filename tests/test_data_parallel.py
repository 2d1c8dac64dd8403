"""data.parallel: English-French verse pairs, one sentence a side, laid out
like C4 with a fixed validation split."""

import gzip
import json

from data import annotate
from data import parallel
from data import sources


def test_pairs_are_single_sentences_in_canonical_order():
  pairs = sources.bible_pairs()
  assert len(pairs) > 20_000
  first = pairs[0]
  assert first["id"] == "1.1.1"
  assert first["source"].startswith("In the beginning God created")
  assert first["target"].startswith("Au commencement, Dieu créa")
  for pair in pairs[::500]:
    for side in ("source", "target"):
      assert len(annotate.split_sentences(pair[side])) == 1, pair
      assert "`" not in pair[side]


def test_records_put_source_then_target_and_split_by_verse():
  pairs = sources.bible_pairs()[:400]
  splits = parallel.records(pairs)
  assert 0 < len(splits["validation"]) < len(splits["train"])
  again = parallel.records(list(reversed(pairs)))
  assert ({r["url"] for r in again["validation"]}
          == {r["url"] for r in splits["validation"]})
  by_url = {f"bible://en-fr/{p['id']}": p for p in pairs}
  for record in splits["train"][:20]:
    source, target = record["text"].split("\n")
    pair = by_url[record["url"]]
    assert (source, target) == (pair["source"], pair["target"])


def test_build_writes_c4_shards_once(tmp_path):
  folder = parallel.build(tmp_path / "parallel")
  stamp = json.loads((folder / "BUILT").read_text())
  shards = sorted((folder / "c4").glob("c4-*.json.gz"))
  assert len(shards) == 3
  count = 0
  for shard in shards:
    with gzip.open(shard, "rt", encoding="utf-8") as f:
      count += sum(1 for _ in f)
  assert count == sum(stamp["pairs"].values())
  mtime = shards[0].stat().st_mtime_ns
  assert parallel.build(folder) == folder
  assert shards[0].stat().st_mtime_ns == mtime
