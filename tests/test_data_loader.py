"""The pretraining loader: contract, exact resume, process shares, bad input."""

import gzip
import json

import numpy as np
import pytest

import data
from data import batch as batch_lib
from data import c4
from data import documents as documents_lib
from data import loader as loader_lib
from data import packing
from data import sample

SAMPLE = {"source": "sample"}


def _rows(batch):
  return [{k: v[r] for k, v in batch.items()}
          for r in range(len(batch["tokens"]))]


def test_sample_batches_obey_the_contract():
  ld = data.pretrain_loader(SAMPLE, seq_len=64, batch_size=4, seed=1)
  for _ in range(3):
    batch = next(ld)
    assert set(batch) == set(batch_lib.KEYS)
    for v in batch.values():
      assert v.shape == (4, 64) and v.dtype == np.int32
    for row in _rows(batch):
      batch_lib.check_row(row)
      assert (row["tokens"] != 0).all()  # train rows are full
  assert ld.tokenizer.specials()["vocab_size"] == 8000


def test_resume_is_exact_and_state_is_json():
  ld = data.pretrain_loader(SAMPLE, seq_len=32, batch_size=3, seed=5)
  for _ in range(7):
    next(ld)
  state = json.loads(json.dumps(ld.get_state()))
  want = [next(ld) for _ in range(5)]
  again = data.pretrain_loader(SAMPLE, seq_len=32, batch_size=3, seed=5)
  again.set_state(state)
  for w in want:
    g = next(again)
    assert all((w[k] == g[k]).all() for k in batch_lib.KEYS)
  other = data.pretrain_loader(SAMPLE, seq_len=32, batch_size=3, seed=6)
  assert not (next(other)["tokens"] == next(data.pretrain_loader(
      SAMPLE, seq_len=32, batch_size=3, seed=5))["tokens"]).all()


def _texts(ds):
  return [e["text"] for e in ds]


def test_process_shares_are_disjoint_and_cover_the_split():
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  src = tfds.builder_from_directory(str(sample.tfds_dir(sample.ensure()))
                                    ).as_data_source(split="validation")
  everything = sorted(src[i]["text"].decode() for i in range(len(src)))
  shares = [_texts(documents_lib.documents(SAMPLE, "validation", 3, i, 3))
            for i in range(3)]
  assert sum(map(len, shares)) == len(everything)
  assert sorted(t for s in shares for t in s) == everything
  assert min(map(len, shares)) >= len(everything) // 3


def test_processes_get_different_batches():
  a, b = (data.pretrain_loader(SAMPLE, seq_len=32, batch_size=2, seed=0,
                               process_index=i, process_count=2)
          for i in range(2))
  assert not (next(a)["tokens"] == next(b)["tokens"]).all()
  with pytest.raises(ValueError, match="process_index 2 outside"):
    data.pretrain_loader(SAMPLE, seq_len=8, batch_size=1, seed=0,
                         process_index=2, process_count=2)


def _global_batches(cfg, procs, steps, rows=4, states=None, **kw):
  """`steps` global batches of `rows` rows read by `procs` processes (and
  the loaders, resumed from `states` when given)."""
  loaders = [data.pretrain_loader(cfg, seq_len=32, batch_size=rows // procs,
                                  seed=3, process_index=i,
                                  process_count=procs, **kw)
             for i in range(procs)]
  for ld in loaders if states else ():
    ld.restore(json.loads(json.dumps(states)))
  out = [np.concatenate([next(ld)["tokens"] for ld in loaders])
         for _ in range(steps)]
  return out, loaders


def _c4_cfg(tmp_path):
  _write_c4(tmp_path, "train", [[f"Shard {s} text {j} goes on. " * (j % 4 + 1)
                                 for j in range(9)] for s in range(3)])
  return {"source": "c4", "path": str(tmp_path), "shuffle_buffer": 4}


@pytest.mark.parametrize("source", ["sample", "c4"])
def test_global_batches_do_not_depend_on_the_process_count(tmp_path, source):
  cfg = SAMPLE if source == "sample" else _c4_cfg(tmp_path)
  one, _ = _global_batches(cfg, 1, 6)
  for procs in (2, 4):
    many, _ = _global_batches(cfg, procs, 6)
    for a, b in zip(one, many):
      np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("source", ["sample", "c4"])
def test_a_run_resumes_on_another_process_count(tmp_path, source):
  cfg = SAMPLE if source == "sample" else _c4_cfg(tmp_path)
  want, _ = _global_batches(cfg, 1, 9)
  _, two = _global_batches(cfg, 2, 4)
  states = [ld.get_state() for ld in two]
  for procs in (1, 4):
    got, _ = _global_batches(cfg, procs, 5, states=states)
    for a, b in zip(want[4:], got):
      np.testing.assert_array_equal(a, b)


def test_rows_can_be_any_global_rows():
  """A process whose devices hold rows 2, 3, 0, 1 reads exactly those."""
  whole = next(data.pretrain_loader(SAMPLE, seq_len=32, batch_size=4, seed=3))
  part = next(data.pretrain_loader(SAMPLE, seq_len=32, batch_size=2, seed=3,
                                   process_count=2, rows=[3, 1]))
  np.testing.assert_array_equal(part["tokens"], whole["tokens"][[3, 1]])


def test_a_state_of_another_global_batch_is_refused():
  ld = data.pretrain_loader(SAMPLE, seq_len=32, batch_size=2, seed=3)
  state = ld.get_state()
  big = data.pretrain_loader(SAMPLE, seq_len=32, batch_size=4, seed=3)
  with pytest.raises(ValueError, match="different global batch size"):
    big.restore([state])


def _write_c4(folder, split, texts_per_shard):
  folder.mkdir(parents=True, exist_ok=True)
  for i, texts in enumerate(texts_per_shard):
    lines = "".join(json.dumps({"text": t, "url": f"u{i}"}) + "\n"
                    for t in texts)
    path = folder / c4.shard_name(split, i, len(texts_per_shard))
    path.write_bytes(gzip.compress(lines.encode()))


@pytest.mark.parametrize("shards,procs", [(4, 3), (2, 3)])
def test_c4_shares_cover_the_shards(tmp_path, shards, procs):
  texts = [[f"doc {s}-{j}." for j in range(7)] for s in range(shards)]
  _write_c4(tmp_path, "train", texts)
  cfg = {"source": "c4", "path": str(tmp_path), "num_epochs": 1,
         "shuffle_buffer": 3}
  shares = [_texts(documents_lib.documents(cfg, "train", 0, i, procs))
            for i in range(procs)]
  assert sorted(t for s in shares for t in s) == sorted(sum(texts, []))


def test_c4_resume_mid_shard(tmp_path):
  _write_c4(tmp_path, "train", [[f"Document number {s}-{j} is here. " * 3
                                 for j in range(20)] for s in range(2)])
  cfg = {"source": "c4", "path": str(tmp_path / "c4-{split}.*.json.gz"),
         "shuffle_buffer": 4}
  ld = data.pretrain_loader(cfg, seq_len=16, batch_size=2, seed=0)
  for _ in range(9):
    next(ld)
  state = json.loads(json.dumps(ld.get_state()))
  want = [next(ld)["tokens"] for _ in range(40)]  # crosses shards and epochs
  again = data.pretrain_loader(cfg, seq_len=16, batch_size=2, seed=0)
  again.set_state(state)
  assert all((w == next(again)["tokens"]).all() for w in want)


def test_bad_input_is_counted_and_survived(tmp_path):
  good = [f"Good document {i}. It has two sentences." for i in range(5)]
  long = "Word " * 3000
  lines = [json.dumps({"text": t}) for t in good[:3]] + [
      '{"text": "caf\xe9 bytes"}'.encode("latin-1"),  # not UTF-8
      json.dumps({"text": ""}), json.dumps({"text": " \n\t "}),
      json.dumps({"text": "bell\x07 and \x1b escape"}), "not json {",
      json.dumps({"url": "no text"}), "", json.dumps({"text": long}),
  ] + [json.dumps({"text": t}) for t in good[3:]]
  blob = b"".join((l if isinstance(l, bytes) else l.encode()) + b"\n"
                  for l in lines)
  (tmp_path / c4.shard_name("train", 0, 2)).write_bytes(gzip.compress(blob))
  whole = gzip.compress(b"".join(json.dumps({"text": f"cut {i}."}).encode()
                                 + b"\n" for i in range(2000)))
  (tmp_path / c4.shard_name("train", 1, 2)).write_bytes(whole[:len(whole) // 2])
  cfg = {"source": "c4", "path": str(tmp_path), "num_epochs": 1,
         "max_doc_rows": 4}
  ld = data.pretrain_loader(cfg, seq_len=64, batch_size=4, seed=0)
  batches = list(ld)
  assert dict(ld.stats) == {"undecodable": 1, "bad_record": 3, "empty": 2,
                            "control_chars": 1, "long_doc_truncated": 1,
                            "truncated_shard": 1}
  tokens = np.concatenate([b["tokens"] for b in batches])
  text = " ".join(ld.tokenizer.decode(r) for r in tokens)
  assert all(g in text for g in good) and "caf" in text and "bell" in text
  assert "cut 0." in text  # the readable prefix of the cut shard is used
  assert (tokens == 1).sum() >= len(good) + 3
  for b in batches:
    for row in _rows(b):
      batch_lib.check_row(row)


def test_missing_shard_is_counted():
  ds = c4.JsonShards(["/nonexistent/c4-train.00000-of-00001.json.gz"],
                     seed=0, num_epochs=1)
  assert list(ds) == [{"text": None, "bad": {"missing_shard": 1}}]
  with pytest.raises(FileNotFoundError, match="no C4 shards"):
    c4.find_shards("/nonexistent", "train")


def test_synthetic_and_unknown_sources():
  ld = data.pretrain_loader({"source": "synthetic", "vocab_size": 300},
                            seq_len=16, batch_size=2, seed=0)
  assert next(ld)["tokens"].shape == (2, 16)
  with pytest.raises(ValueError, match="unknown data.source"):
    data.pretrain_loader({"source": "wiki"}, seq_len=8, batch_size=1, seed=0)
  with pytest.raises(ValueError, match="unknown data config field"):
    data.pretrain_loader({"sorce": "c4"}, seq_len=8, batch_size=1, seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_worker_processes_give_the_same_stream(workers):
  base = data.pretrain_loader(SAMPLE, seq_len=32, batch_size=4, seed=2)
  mp = data.pretrain_loader({**SAMPLE, "worker_count": workers}, seq_len=32,
                            batch_size=4, seed=2)
  try:
    for _ in range(3):
      assert (next(base)["tokens"] == next(mp)["tokens"]).all()
    with pytest.raises(ValueError, match="worker_count > 0"):
      base.restore([mp.get_state(), mp.get_state()])
  finally:
    mp.close()
  with pytest.raises(ValueError, match="worker_count=3 must divide the 4"):
    data.pretrain_loader({**SAMPLE, "worker_count": 3}, seq_len=32,
                         batch_size=4, seed=2)


def test_tfds_source_by_name_and_missing_dataset():
  folder = sample.ensure()
  cfg = {"source": "tfds", "tfds_name": "zoo_c4_sample",
         "data_dir": str(folder / "tfds")}
  via_tfds = next(data.pretrain_loader(cfg, seq_len=16, batch_size=2, seed=4,
                                       split="validation"))
  via_sample = next(data.pretrain_loader(SAMPLE, seq_len=16, batch_size=2,
                                         seed=4, split="validation"))
  assert (via_tfds["tokens"] == via_sample["tokens"]).all()
  with pytest.raises(FileNotFoundError, match="tfds build no_such_set"):
    data.pretrain_loader({**cfg, "tfds_name": "no_such_set"}, seq_len=8,
                         batch_size=1, seed=0)


STREAM = {**SAMPLE, "mode": "stream"}


def _stream_of_row(cfg, tokenizer, seed, row, rows, length):
  """The first `length` tokens of row `row`'s stream, built directly: its
  share of the documents, each closed by EOS, concatenated."""
  source = documents_lib.shuffled_source(cfg, "train", seed)
  docs = documents_lib.documents(cfg, "train", seed, row, rows, source).map(
      loader_lib.Annotate(tokenizer, None))
  eos, out = tokenizer.specials()["eos"], []
  for doc in docs:
    if len(doc["tokens"]):
      out.extend(packing.close_document(doc, eos)["tokens"])
    if len(out) >= length:
      return np.array(out[:length], np.int32)
  raise AssertionError("the stream ended")


def test_stream_row_continues_where_it_stopped():
  ld = data.pretrain_loader(STREAM, seq_len=32, batch_size=3, seed=5)
  steps = [next(ld) for _ in range(8)]
  eos = ld.tokenizer.specials()["eos"]
  for r in range(3):
    got = np.concatenate([b["tokens"][r] for b in steps])
    want = _stream_of_row(STREAM, ld.tokenizer, 5, r, 3, len(got))
    np.testing.assert_array_equal(got, want)
  continued = 0
  for before, after in zip(steps, steps[1:]):
    for row in _rows(after):
      batch_lib.check_row(row)  # doc_ids restart at 1 in every row
    # A row's first document is the one the row before left open, unless
    # that one ended with EOS.
    open_ = before["tokens"][:, -1] != eos
    same = before["doc_keys"][:, -1] == after["doc_keys"][:, 0]
    assert (same[open_]).all()
    continued += open_.sum()
  assert continued > 0


def _c4_long(tmp_path):
  texts = ["A short first document.", "Long text goes on. " * 200,
           "The short last one."]
  _write_c4(tmp_path, "train", [texts])
  return {"source": "c4", "path": str(tmp_path), "num_epochs": 1,
          "max_doc_rows": 1}


def test_stream_reads_long_documents_whole(tmp_path):
  cfg = _c4_long(tmp_path)
  packed = data.pretrain_loader(cfg, seq_len=16, batch_size=1, seed=0)
  stream = data.pretrain_loader({**cfg, "mode": "stream"}, seq_len=16,
                                batch_size=1, seed=0)
  cut, whole = list(packed), list(stream)
  assert dict(packed.stats) == {"long_doc_truncated": 1}
  assert not stream.stats and len(whole) > len(cut) + 20
  ids = np.concatenate([b["tokens"][0] for b in whole])
  text = stream.tokenizer.decode(ids[ids != 0])
  assert text.count("goes on") == 200 and "short last" in text


def test_stream_resumes_mid_stream_on_any_process_count():
  want, _ = _global_batches(STREAM, 1, 9)
  _, two = _global_batches(STREAM, 2, 4)
  states = [ld.get_state() for ld in two]
  assert all(s["mode"] == "stream" for s in states)
  for procs in (1, 2, 4):
    got, _ = _global_batches(STREAM, procs, 5, states=states)
    for a, b in zip(want[4:], got):
      np.testing.assert_array_equal(a, b)


def test_stream_mode_errors():
  ld = data.pretrain_loader(STREAM, seq_len=32, batch_size=2, seed=3)
  packed = data.pretrain_loader(SAMPLE, seq_len=32, batch_size=2, seed=3)
  with pytest.raises(ValueError, match="saved in data.mode='packed'"):
    ld.restore([packed.get_state()])
  with pytest.raises(ValueError, match="unknown data.mode 'rows'"):
    data.pretrain_loader({**SAMPLE, "mode": "rows"}, seq_len=8,
                         batch_size=1, seed=0)
  with pytest.raises(ValueError, match="synthetic source's rows are"):
    data.pretrain_loader({"source": "synthetic", "mode": "stream"},
                         seq_len=8, batch_size=1, seed=0)
