"""Minimal pairs: hand-checked templates, balance, filters, the real sample."""

import collections
import hashlib
import json
import re
import shutil

import pytest

from data import minimal_pairs as mp
from data import sample


def _counter(words: str, count: int = 2) -> collections.Counter:
  return collections.Counter({w: count for w in words.split()})


def _words(sentence: str) -> list[str]:
  return re.findall(r"[\w']+", sentence.lower())


def _critical(pair: mp.Pair) -> tuple[str, str]:
  """The one (good word, bad word) where the two sentences differ."""
  good, bad = pair.good.split(), pair.bad.split()
  assert len(good) == len(bad), pair
  diff = [(g, b) for g, b in zip(good, bad) if g != b]
  assert len(diff) == 1, pair
  return diff[0]


def _as_set(pairs) -> set[tuple[str, str]]:
  return {(p.good, p.bad) for p in pairs}


@pytest.fixture(scope="module")
def folder():
  return sample.ensure()


@pytest.fixture(scope="module")
def counts(folder):
  return mp.word_counts(mp.training_texts(folder))


@pytest.fixture(scope="module")
def real(counts, tok):
  return mp.build(counts, tok)


def test_word_counts_and_training_texts(folder, counts):
  got = mp.word_counts(["Don't stop, the DOG's dogs' 'quote' 42 x2"])
  assert got == collections.Counter(
      {"don't": 1, "stop": 1, "the": 1, "dog's": 1, "dogs": 1, "quote": 1,
       "x": 1})
  stamp = json.loads((folder / "BUILT").read_text())
  assert len(mp.training_texts(folder)) == stamp["documents"]["train"]
  assert counts["the"] > 1000


def test_hand_checked_pairs():
  counts = _counter("mary saw this these house houses the dog dogs near "
                    "car cars works work")
  got = mp.build(counts, n=6, phenomena=("det_noun_agreement",))
  assert _as_set(got["det_noun_agreement"]) == {
      ("Mary saw this house.", "Mary saw these house."),
      ("Mary saw these houses.", "Mary saw this houses."),
      ("Mary saw this dog.", "Mary saw these dog."),
      ("Mary saw these dogs.", "Mary saw this dogs."),
      ("Mary saw this car.", "Mary saw these car."),
      ("Mary saw these cars.", "Mary saw this cars.")}
  checked = got["det_noun_agreement"]
  got = mp.build(counts, n=4, phenomena=("subject_verb_pp",))
  checked += got["subject_verb_pp"]
  assert _as_set(got["subject_verb_pp"]) == {
      ("The dog near the cars works.", "The dog near the cars work."),
      ("The dogs near the car work.", "The dogs near the car works."),
      ("The dog near the houses works.", "The dog near the houses work."),
      ("The dogs near the house work.", "The dogs near the house works.")}
  counts = _counter("the boy boys hurt himself themselves mary has eaten ate "
                    "bread")
  got = mp.build(counts, n=2, phenomena=("reflexive_number",
                                         "irregular_participle"))
  assert _as_set(got["reflexive_number"]) == {
      ("The boy hurt himself.", "The boy hurt themselves."),
      ("The boys hurt themselves.", "The boys hurt himself.")}
  assert _as_set(got["irregular_participle"]) == {
      ("Mary has eaten the bread.", "Mary has ate the bread."),
      ("Mary ate the bread.", "Mary eaten the bread.")}
  for p in checked + got["reflexive_number"] + got["irregular_participle"]:
    _critical(p)


def test_rare_word_never_appears_and_too_few_pairs_names_phenomenon():
  counts = _counter("mary saw this these house the dog dogs")
  counts["houses"] = 1
  got = mp.build(counts, n=2, phenomena=("det_noun_agreement",))
  assert _as_set(got["det_noun_agreement"]) == {
      ("Mary saw this dog.", "Mary saw these dog."),
      ("Mary saw these dogs.", "Mary saw this dogs.")}
  with pytest.raises(ValueError, match=r"det_noun_agreement.* only 2 "):
    mp.build(counts, n=4, phenomena=("det_noun_agreement",))
  with pytest.raises(ValueError, match="reflexive_number.* only 0 "):
    mp.build(counts, n=2, phenomena=("reflexive_number",))
  with pytest.raises(ValueError, match="even"):
    mp.build(counts, n=3)
  with pytest.raises(ValueError, match="unknown"):
    mp.build(counts, n=2, phenomena=("a_an",))


def test_too_few_pairs_on_the_real_sample_names_phenomenon(counts):
  with pytest.raises(ValueError, match="phenomenon 'det_noun_agreement'"):
    mp.build(counts, n=10**9)


def test_deterministic_and_seeded(counts, tok, real):
  assert mp.build(counts, tok) == real
  other = mp.build(counts, tok, seed=1)
  for name in mp.PHENOMENA:
    assert other[name] != real[name]
    assert _as_set(other[name]) != _as_set(real[name])


def test_real_sample_sizes_vocabulary_and_equal_pieces(counts, tok, real):
  assert len(mp.PHENOMENA) >= 6 and tuple(real) == mp.PHENOMENA
  goods, bads = [], []
  for name, rows in real.items():
    assert len(rows) == 300, name
    assert len(_as_set(rows)) == 300, name  # no duplicates
    for p in rows:
      assert p.phenomenon == name
      _critical(p)
      for s in (p.good, p.bad):
        assert s[0].isupper() and s.endswith("."), s
        assert all(counts[w] >= 2 for w in _words(s)), s
      goods.append(p.good)
      bads.append(p.bad)
  lengths = [(len(g), len(b)) for g, b in zip(tok.encode_batch(goods),
                                              tok.encode_batch(bads))]
  assert all(g == b for g, b in lengths)


def test_tokenizer_drops_critical_words_of_uneven_length(counts, tok, real):
  # The sample tokenizer splits "runs" into "run" + "s".
  assert len(tok.encode("runs")) != len(tok.encode("run"))
  untokenized = mp.candidate_counts(counts)
  filtered = mp.candidate_counts(counts, tok)
  assert filtered["subject_verb_simple"] < untokenized["subject_verb_simple"]
  assert all(filtered[p] >= 300 for p in mp.PHENOMENA)
  plain = mp.build(counts, n=2000, phenomena=("subject_verb_simple",))
  assert any("runs" in _words(p.good) for p in plain["subject_verb_simple"])
  assert not any("runs" in _words(p.good + " " + p.bad)
                 for rows in real.values() for p in rows)


def test_removing_a_noun_removes_it_from_all_pairs(counts, real):
  used = {w for rows in real.values() for p in rows for w in _words(p.good)}
  sg, pl = next(n for n in mp._parse(mp._TABLES["animate"])
                if n[0] in used and n[1] in used)
  fewer = collections.Counter(counts)
  del fewer[pl]
  got = mp.build(fewer)
  for rows in got.values():
    for p in rows:
      assert not {sg, pl} & set(_words(p.good + " " + p.bad)), p


def test_balanced_so_a_context_free_scorer_sits_at_chance(real):
  def score(sentence):  # a fixed random integer per word, summed
    return sum(int(hashlib.sha256(w.encode()).hexdigest()[:8], 16)
               for w in _words(sentence))

  for name, rows in real.items():
    critical = [_critical(p) for p in rows]
    assert (collections.Counter(g for g, _ in critical) ==
            collections.Counter(b for _, b in critical)), name
    wins = sum(1.0 if score(p.good) > score(p.bad) else
               0.5 if score(p.good) == score(p.bad) else 0.0 for p in rows)
    assert wins / len(rows) == 0.5, name


def test_load_caches_json_and_reads_it_back(tmp_path, monkeypatch, folder,
                                            tok, real):
  (tmp_path / "c4").mkdir()
  for path in (folder / "c4").glob("c4-train.*.json.gz"):
    shutil.copy(path, tmp_path / "c4")
  assert mp.load(tmp_path, tok) == real
  key = hashlib.sha256(tok.proto).hexdigest()[:16]
  cache = tmp_path / f"minimal_pairs-300-{key}.json"
  assert [p.name for p in tmp_path.glob("minimal_pairs*")] == [cache.name]

  def no_build(*args, **kwargs):
    raise AssertionError("rebuilt instead of reading the cache")

  monkeypatch.setattr(mp, "build", no_build)
  assert mp.load(tmp_path, tok) == real
  blob = json.loads(cache.read_text())
  cache.write_text(json.dumps({**blob, "fingerprint": "stale"}))
  monkeypatch.setattr(mp, "build", lambda *args, **kwargs: {"rebuilt": []})
  assert mp.load(tmp_path, tok) == {"rebuilt": []}
  assert mp.load(tmp_path, None, n=2) == {"rebuilt": []}
  assert (tmp_path / "minimal_pairs-2-none.json").exists()


def test_write_jsonl(tmp_path, real):
  path = mp.write_jsonl(real, tmp_path / "pairs.jsonl")
  rows = [json.loads(line) for line in path.read_text().splitlines()]
  assert len(rows) == 300 * len(mp.PHENOMENA)
  assert rows[0] == dict(phenomenon=mp.PHENOMENA[0],
                         good=real[mp.PHENOMENA[0]][0].good,
                         bad=real[mp.PHENOMENA[0]][0].bad)
