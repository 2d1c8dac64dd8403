"""data.articles: the BBC articles as fields (topic, headline, body), each
wrapped in its markers with its field id, in the sample's splits."""

import numpy as np

from data import annotate
from data import articles
from data import batch as batch_lib
from data import loader
from data import packing
from data import sources

SPECIALS = {"sentinel0": 7999}


def test_markers_are_the_top_sentinels_in_field_order():
  assert articles.markers(SPECIALS) == [(7999, 7998), (7997, 7996),
                                        (7995, 7994)]


def test_records_keep_the_samples_splits_and_leave_test_out():
  pool = sources.bbc_articles()
  splits = articles.records(pool)
  by_split = {s: sum(a["split"] == s for a in pool) for s in
              ("train", "validation")}
  assert {s: len(r) for s, r in splits.items()} == by_split
  first = next(a for a in pool if a["split"] == "train")
  topic, headline, body = splits["train"][0]["text"].split("\n", 2)
  assert (topic, headline, body) == (first["topic"], first["headline"],
                                     first["body"])


def test_fields_are_wrapped_in_markers_and_numbered_on(tok):
  marks = articles.markers(tok.specials())
  text = "sport\nA big win.\nThey won. Fans cheered.\nIt rained."
  doc = annotate.annotate_fields(tok, text, marks)
  ids, fid = doc["tokens"], doc["field_ids"]
  for f, (begin, end) in enumerate(marks, 1):
    at = np.flatnonzero(fid == f)
    assert ids[at[0]] == begin and ids[at[-1]] == end
    assert (np.diff(at) == 1).all()  # one contiguous span per field
  body = ids[(fid == 3)][1:-1]
  assert tok.decode(body.tolist()) == "They won. Fans cheered. It rained."
  # Sentences: the topic, the headline, then the body's three.
  assert doc["sentence_ids"].tolist()[-1] == 5
  assert (np.diff(doc["word_ids"]) >= 0).all()
  rows = packing.pack_documents([doc], 64, eos=tok.specials()["eos"])
  row = {k: v[0] for k, v in rows.items()}
  batch_lib.check_row(row)
  n = len(ids)
  assert row["field_ids"][n] == 0  # the closing eos is in no field
  plain = annotate.annotate(tok, text)
  assert not plain["field_ids"].any()


def test_the_articles_source_rows_carry_field_ids(tmp_path):
  cfg = loader.config_lib.default_config()
  cfg.source, cfg.path, cfg.worker_count = "articles", str(tmp_path), 0
  batch = next(iter(loader.pretrain_loader(cfg, seq_len=64, batch_size=2,
                                           seed=0)))
  real = batch["tokens"] > 0
  assert set(np.unique(batch["field_ids"][real])) <= {0, 1, 2, 3}
  assert (batch["field_ids"][real] == 3).mean() > 0.5  # mostly body
  assert not batch["field_ids"][~real].any()
