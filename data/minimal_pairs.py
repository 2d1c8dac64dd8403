"""Grammatical minimal pairs (BLiMP-style) over the embedded sample's words.

    pairs = minimal_pairs.load(tokenizer=tok)   # {phenomenon: [Pair, ...]}

Each phenomenon is a sentence template whose slots take items of the
hand-written lexicon below. The good and bad sentence of a pair differ in one
word, the critical word, and are otherwise identical; a language model passes
a pair when it gives `good` the higher log-likelihood.

Three rules keep the suite fair to any model:
  * every word occurs at least `min_count` times in the training split;
  * each sampled lexical choice is emitted in both configurations (singular
    and plural subject; perfect and simple past), so each critical form is
    good exactly as often as bad: a context-blind scorer sits at exactly 50%;
  * with a tokenizer, the critical forms of every choice encode to equally
    many pieces, so a preference for shorter texts cannot decide a pair.
"""

import collections
import dataclasses
import gzip
import hashlib
import json
import math
import os
import pathlib
import random
import re
from typing import Callable, Iterable, Mapping, Sequence

from data import sample as sample_lib

VERSION = "1"
# A word: a maximal run of letters, with apostrophes inside it ("don't").
_WORD = re.compile(r"[^\W\d_]+(?:['\u2019][^\W\d_]+)*")

# The lexicon. Items are comma-separated; an item's forms are separated by
# spaces (singular then plural; 3rd-person singular then plural; participle
# then simple past); words after the two forms are a fixed complement.
# Phrase lists are separated by "|"; an empty phrase is allowed.
_TABLES = dict(
    names="""Mary, John, David, Sarah, Michael, Peter, James, Anna, Paul,
      Robert, Susan, Tom, Jane, Alice, George, Henry, Richard, Helen, Martin,
      Emma, Laura, Kate, Tony, Andrew, Mark, Jack, Anne, Elizabeth, Charles,
      William, Frank, Joe, Linda, Ruth, Nancy, Harry, Sam, Ben, Simon,
      Margaret, Edward, Arthur""",
    animate="""dog dogs, cat cats, horse horses, bird birds, boy boys,
      girl girls, man men, woman women, child children, teacher teachers,
      student students, doctor doctors, nurse nurses, player players,
      driver drivers, worker workers, farmer farmers, officer officers,
      soldier soldiers, writer writers, artist artists, judge judges,
      leader leaders, member members, manager managers, minister ministers,
      parent parents, patient patients, visitor visitors, friend friends,
      customer customers, king kings, queen queens, singer singers,
      actor actors, author authors, lawyer lawyers, pilot pilots, guard guards,
      baby babies, brother brothers, sister sisters, mother mothers,
      father fathers, son sons, daughter daughters, husband husbands,
      wife wives, scientist scientists, fan fans, voter voters,
      reporter reporters, official officials, boss bosses, owner owners,
      partner partners, agent agents, expert experts, candidate candidates,
      coach coaches, captain captains, citizen citizens, critic critics,
      dancer dancers, director directors, employee employees,
      journalist journalists, lady ladies, musician musicians,
      passenger passengers, poet poets, priest priests, prisoner prisoners,
      professor professors, stranger strangers, tourist tourists,
      victim victims, winner winners, person people, engineer engineers""",
    things="""car cars, house houses, tree trees, table tables, window windows,
      door doors, box boxes, book books, chair chairs, building buildings,
      river rivers, road roads, wall walls, bridge bridges, church churches,
      school schools, shop shops, office offices, station stations,
      garden gardens, field fields, hill hills, gate gates, bank banks,
      hotel hotels, park parks, lake lakes, street streets, truck trucks,
      boat boats, ship ships, train trains, desk desks, machine machines,
      computer computers, farm farms, village villages, town towns,
      city cities, factory factories, tower towers, restaurant restaurants,
      museum museums, hospital hospitals, rock rocks, bottle bottles, bed beds,
      picture pictures, letter letters, bag bags, key keys, cup cups,
      phone phones, coat coats, flower flowers, map maps, painting paintings,
      room rooms, kitchen kitchens, island islands, mountain mountains,
      forest forests, plane planes, bus buses, statue statues, shelf shelves,
      knife knives, palace palaces, market markets, store stores,
      theatre theatres, library libraries""",
    det_verbs="""saw, liked, found, wanted, noticed, remembered, described,
      photographed, mentioned, chose, needed, watched, loved, hated, ignored,
      preferred, admired, painted, imagined, missed, avoided, followed""",
    dets="this these, that those",
    verbs="""works work, talks talk, lives live, studies study,
      comes come home, goes go home, calls call, worries worry,
      survives survive, appears appear, tries try hard, breathes breathe,
      remains remain calm, follows follow, attacks attack, says say nothing,
      does do nothing, seems seem happy, makes make noise, needs need help,
      wants want food, takes take notes, gives give advice, shows show respect,
      looks look tired, becomes become angry, fears fear nothing,
      means mean well, hopes hope so, believes believe it,
      celebrates celebrate, denies deny it, has have time, marries marry,
      runs run, walks walk, sleeps sleep, waits wait, smiles smile,
      laughs laugh, sings sing, dances dance, cries cry, eats eat, plays play,
      reads read""",
    transitive="""likes like, sees see, knows know, loves love, hates hate,
      helps help, meets meet, watches watch, trusts trust, follows follow,
      visits visit, calls call, remembers remember, fears fear, needs need,
      wants want, finds find, hears hear, supports support, pays pay,
      teaches teach, thanks thank, chooses choose, avoids avoid,
      respects respect, blames blame, praises praise, attacks attack,
      protects protect, invites invite, joins join, leads lead, serves serve,
      ignores ignore, prefers prefer, expects expect, interviews interview,
      kisses kiss, feeds feed, defends defend, employs employ, warns warn,
      tells tell, asks ask, impresses impress, recognizes recognize,
      understands understand, believes believe, describes describe,
      mentions mention""",
    prepositions="""near, behind, beside, with, without, from, above, below,
      under, inside, beyond, around""",
    male="""man men, boy boys, king kings, father fathers, brother brothers,
      son sons, husband husbands, gentleman gentlemen, prince princes,
      lord lords, monk monks, businessman businessmen""",
    female="""woman women, girl girls, queen queens, mother mothers,
      sister sisters, daughter daughters, wife wives, lady ladies,
      actress actresses, nun nuns, aunt aunts, widow widows""",
    reflexive_verbs="""hurt, saw, blamed, helped, liked, trusted, praised,
      defended, prepared, asked, taught, enjoyed, introduced, described,
      watched, pushed, cut, protected, washed, dressed, fed, loved, hated,
      killed, shot, injured, found, forced, reminded, excused, congratulated,
      surprised, criticized, embarrassed, amused, kicked, scratched, burned,
      shaved, painted, photographed, imagined, reassured, exposed, hid,
      supported, expressed, tested, poisoned, recognized, questioned,
      convinced, persuaded, insulted, saved, rescued, trained""",
    irregular="""eaten ate the bread, taken took the money, given gave up,
      written wrote the letter, seen saw the film, broken broke the window,
      chosen chose the winner, driven drove the car, spoken spoke to them,
      known knew the answer, thrown threw the ball, begun began the work,
      done did the job, drawn drew the picture, blown blew the whistle,
      grown grew up, flown flew the plane, woven wove the basket,
      undertaken undertook the task, overtaken overtook the car,
      gone went home, fallen fell asleep, stolen stole the money,
      hidden hid the key, sung sang the song, ridden rode the horse,
      worn wore the coat, drunk drank the water""",
    copulas="is are, was were",
    adjectives="""happy, ready, tired, busy, late, early, angry, hungry, sick,
      afraid, alone, quiet, young, old, safe, right, wrong, free, proud, sorry,
      careful, popular, famous, strong, weak, rich, poor, tall, short, honest,
      lucky, calm, nervous, sad, glad, kind, brave, clever, wise, polite,
      friendly, lonely, upset, ill, alive, asleep, awake, present, silent,
      serious, curious, jealous, eager, confident, worried, pleased, excited,
      surprised, bored, wet, hot, cold""",
    adv_present="""|today|again|now|every day|every week|at night|
      in the morning|on Sunday|this week|sometimes""",
    adv_past="""|again|today|yesterday|last night|at home|at work|
      in the morning|on Sunday""",
    adv_perfect="|again|today|this week|at last|twice",
)
PHENOMENA = ("det_noun_agreement", "subject_verb_simple", "subject_verb_pp",
             "subject_verb_rc", "reflexive_number", "irregular_participle",
             "copula_agreement")
_FINGERPRINT = hashlib.sha256(
    repr((VERSION, PHENOMENA, sorted(_TABLES.items()))).encode()
).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Pair:
  """One minimal pair: `good` is grammatical, `bad` differs in one word."""
  phenomenon: str
  good: str
  bad: str


def _parse(text: str) -> tuple[tuple[str, ...], ...]:
  """The items of a table: `|`-separated phrases or `,`-separated forms."""
  if "|" in text:
    return tuple((" ".join(p.split()),) for p in text.split("|"))
  return tuple(tuple(item.split()) for item in text.split(",") if item.strip())


def _sentence(*parts) -> str:
  """Joins words and word tuples, capitalised, with a closing period."""
  words = [w for p in parts for w in ((p,) if isinstance(p, str) else p) if w]
  text = " ".join(words)
  return text[:1].upper() + text[1:] + "."


@dataclasses.dataclass(frozen=True)
class _Spec:
  """A phenomenon: slots of lexicon tables and a template over them.

  `render(items, config, word)` is the sentence for one item per slot in
  configuration 0 or 1 with `word` in the critical position; the item of slot
  `critical` holds the two critical forms, `forms(item)`, of which the one at
  index `config` is the good one. `frame` is the template's own words.
  """
  slots: tuple[str, ...]
  critical: int
  render: Callable[[Sequence[tuple], int, str], str]
  frame: tuple[str, ...] = ("the",)
  forms: Callable[[tuple], tuple[str, str]] = lambda item: item[:2]


_SPECS = {
    "det_noun_agreement": _Spec(
        ("names", "det_verbs", "dets", "nouns"), 2, frame=(),
        render=lambda it, c, w: _sentence(it[0], it[1], w, it[3][c])),
    "subject_verb_simple": _Spec(
        ("animate", "verbs", "adv_present"), 1,
        render=lambda it, c, w: _sentence(
            "the", it[0][c], w, it[1][2:], it[2])),
    "subject_verb_pp": _Spec(
        ("animate", "prepositions", "things", "verbs", "adv_present"), 3,
        render=lambda it, c, w: _sentence(
            "the", it[0][c], it[1], "the", it[2][1 - c], w, it[3][2:],
            it[4])),
    "subject_verb_rc": _Spec(
        ("animate", "animate", "transitive", "verbs", "adv_present"), 3,
        frame=("the", "that"),
        render=lambda it, c, w: _sentence(
            "the", it[0][c], "that", "the", it[1][1 - c], it[2][1 - c], w,
            it[3][2:], it[4])),
    "reflexive_number": _Spec(
        ("gendered", "reflexive_verbs", "adv_past"), 0,
        frame=("the", "themselves"), forms=lambda it: (it[2], "themselves"),
        render=lambda it, c, w: _sentence("the", it[0][c], it[1], w, it[2])),
    "irregular_participle": _Spec(
        ("subjects", "irregular", "adv_perfect"), 1, frame=(),
        render=lambda it, c, w: _sentence(
            it[0][0], it[0][1] if c == 0 else "", w, it[1][2:], it[2])),
    "copula_agreement": _Spec(
        ("animate", "copulas", "adjectives"), 1,
        render=lambda it, c, w: _sentence("the", it[0][c], w, it[2])),
}


def word_counts(texts: Iterable[str]) -> collections.Counter:
  """Counts of the lower-cased words of `texts`.

  Args:
    texts: documents.

  Returns:
    {word: occurrences}; a word is a maximal run of letters (apostrophes
    allowed inside it).
  """
  counts = collections.Counter()
  for text in texts:
    counts.update(_WORD.findall(text.lower()))
  return counts


def _known(item: Iterable[str], counts: Mapping[str, int],
           min_count: int) -> bool:
  """Whether every word of every string of `item` is frequent enough."""
  return all(counts.get(w, 0) >= min_count
             for s in item for w in _WORD.findall(s.lower()))


def _lexicon(counts: Mapping[str, int], min_count: int) -> dict[str, tuple]:
  """The lexicon tables, keeping only items whose words are all frequent."""
  tables = {k: _parse(v) for k, v in _TABLES.items()}
  tables["nouns"] = tables["animate"] + tables["things"]
  tables["gendered"] = (tuple(i[:2] + ("himself",) for i in tables["male"]) +
                        tuple(i[:2] + ("herself",) for i in tables["female"]))
  keep = lambda items: tuple(i for i in dict.fromkeys(items)
                             if _known(i, counts, min_count))
  tables = {k: keep(v) for k, v in tables.items()}
  tables["subjects"] = keep(tuple((n[0], "has") for n in tables["names"]) +
                            tuple((f"the {n[c]}", aux)
                                  for n in tables["animate"]
                                  for c, aux in enumerate(("has", "have"))))
  return tables


def _same_length(tokenizer, texts: Sequence[str]) -> bool:
  """Whether all `texts` encode to the same number of pieces."""
  return len({len(ids) for ids in tokenizer.encode_batch(list(texts))}) == 1


def _slots(spec: _Spec, lexicon: dict, counts: Mapping[str, int],
           min_count: int, tokenizer) -> list[tuple]:
  """The filled slots of `spec`; all empty when a frame word is rare."""
  if not _known(spec.frame, counts, min_count):
    return [() for _ in spec.slots]
  slots = [lexicon[s] for s in spec.slots]
  if tokenizer is not None:
    slots[spec.critical] = tuple(
        i for i in slots[spec.critical]
        if _same_length(tokenizer, spec.forms(i)))
  return slots


def _seed(seed: int, name: str) -> int:
  """A stable per-phenomenon seed (Python's `hash` varies by process)."""
  return int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:8],
                        "big")


def _items(slots: Sequence[tuple], index: int) -> list[tuple]:
  """The choice number `index` of the product of `slots` (mixed radix)."""
  items = []
  for slot in reversed(slots):
    index, i = divmod(index, len(slot))
    items.append(slot[i])
  return items[::-1]


def _group(name: str, spec: _Spec, items: list[tuple]) -> list[Pair]:
  """The two pairs of one lexical choice, one per configuration."""
  forms = spec.forms(items[spec.critical])
  return [Pair(name, spec.render(items, c, forms[c]),
               spec.render(items, c, forms[1 - c])) for c in (0, 1)]


def _sample(name: str, spec: _Spec, slots: list[tuple], tokenizer, n: int,
            seed: int) -> list[Pair]:
  """`n` pairs of distinct lexical choices drawn without replacement."""
  total = math.prod(len(s) for s in slots)
  rng = random.Random(_seed(seed, name))
  seen, goods, pairs = set(), set(), []
  while 2 * total >= n > len(pairs) and len(seen) < total:
    index = rng.randrange(total)
    if index in seen:
      continue
    seen.add(index)
    group = _group(name, spec, _items(slots, index))
    if any(p.good in goods for p in group):
      continue
    if tokenizer is not None and not all(
        _same_length(tokenizer, (p.good, p.bad)) for p in group):
      continue
    goods.update(p.good for p in group)
    pairs += group
  if len(pairs) < n:
    made = len(pairs) if 2 * total >= n else 2 * total
    raise ValueError(
        f"minimal pairs: phenomenon {name!r} can make only {made} distinct "
        f"pairs, {n} wanted (too few of its words are frequent enough)")
  return pairs


def candidate_counts(counts: Mapping[str, int], tokenizer=None,
                     min_count: int = 2) -> dict[str, int]:
  """{phenomenon: candidate pairs before sampling}; arguments as `build`."""
  lexicon = _lexicon(counts, min_count)
  return {name: 2 * math.prod(
      len(s) for s in _slots(spec, lexicon, counts, min_count, tokenizer))
          for name, spec in _SPECS.items()}


def build(counts: Mapping[str, int], tokenizer=None, n: int = 300,
          min_count: int = 2, seed: int = 0,
          phenomena: Sequence[str] = PHENOMENA) -> dict[str, list[Pair]]:
  """Samples `n` minimal pairs per phenomenon from the filtered lexicon.

  Args:
    counts: lower-case word counts of the corpus, as from `word_counts`.
    tokenizer: anything with `encode_batch(texts) -> list[list[int]]`; when
      given, good and bad sentences of every pair encode to equal lengths.
    n: pairs per phenomenon; even, since each lexical choice gives 2 pairs.
    min_count: the least count of every word used.
    seed: the sampling seed (combined with each phenomenon's name).
    phenomena: the phenomena to build, a subset of `PHENOMENA`.

  Returns:
    {phenomenon: [Pair] * n}, the same for the same arguments.

  Raises:
    ValueError: n is not a positive even number, a phenomenon is unknown, or
      a phenomenon cannot make n distinct pairs (the message names it).
  """
  if n <= 0 or n % 2:
    raise ValueError(f"minimal pairs: n={n} must be positive and even")
  unknown = [p for p in phenomena if p not in _SPECS]
  if unknown:
    raise ValueError(f"minimal pairs: unknown phenomena {unknown}")
  lexicon = _lexicon(counts, min_count)
  return {name: _sample(name, _SPECS[name], _slots(
      _SPECS[name], lexicon, counts, min_count, tokenizer), tokenizer, n, seed)
          for name in phenomena}


def training_texts(sample_dir=None) -> list[str]:
  """The texts of the sample's training documents, in shard order.

  Args:
    sample_dir: the sample folder; `data.sample.default_dir()` when None.

  Returns:
    The "text" field of every record of its `c4/c4-train.*.json.gz` shards.
  """
  folder = pathlib.Path(sample_dir or sample_lib.default_dir())
  paths = sorted((folder / "c4").glob("c4-train.*.json.gz"))
  if not paths:
    raise FileNotFoundError(f"no c4-train shards under {folder / 'c4'}; "
                            "build the sample with `python -m data.sample`")
  texts = []
  for path in paths:
    with gzip.open(path, "rt", encoding="utf-8") as f:
      texts += [json.loads(line)["text"] for line in f if line.strip()]
  return texts


def _tokenizer_key(tokenizer) -> str:
  """A short hash of a tokenizer's model, or 'none'."""
  if tokenizer is None:
    return "none"
  blob = getattr(tokenizer, "proto", None)
  if blob is None:
    blob = repr((getattr(tokenizer, "lower_case", None),
                 list(tokenizer.vocab))).encode()
  return hashlib.sha256(blob).hexdigest()[:16]


def load(sample_dir=None, tokenizer=None, n: int = 300
         ) -> dict[str, list[Pair]]:
  """`build` over the sample's training split, cached as JSON in its folder.

  Args:
    sample_dir: the sample folder; `data.sample.default_dir()` when None.
    tokenizer: passed to `build`; its model's hash names the cache file.
    n: pairs per phenomenon.

  Returns:
    {phenomenon: [Pair] * n}, read from
    `<sample_dir>/minimal_pairs-<n>-<tokenizer hash or 'none'>.json` when
    that file holds pairs of this lexicon, else built and written there.
  """
  folder = pathlib.Path(sample_dir or sample_lib.default_dir())
  path = folder / f"minimal_pairs-{n}-{_tokenizer_key(tokenizer)}.json"
  try:
    cached = json.loads(path.read_text())
  except (FileNotFoundError, ValueError):
    cached = {}
  if cached.get("fingerprint") == _FINGERPRINT:
    return {name: [Pair(name, g, b) for g, b in rows]
            for name, rows in cached["pairs"].items()}
  pairs = build(word_counts(training_texts(folder)), tokenizer, n)
  blob = dict(fingerprint=_FINGERPRINT, n=n, pairs={
      name: [[p.good, p.bad] for p in rows] for name, rows in pairs.items()})
  tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
  tmp.write_text(json.dumps(blob, indent=0))
  os.replace(tmp, path)
  return pairs


def write_jsonl(pairs: Mapping[str, list[Pair]], path) -> pathlib.Path:
  """Writes `pairs` ({phenomenon: [Pair]}) to `path`, one JSON object a line.
  """
  path = pathlib.Path(path)
  with path.open("w", encoding="utf-8") as f:
    for rows in pairs.values():
      for p in rows:
        f.write(json.dumps(dataclasses.asdict(p)) + "\n")
  return path
