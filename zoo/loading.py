"""`zoo.load(path)`: a trained model for notebooks, whatever wrote it.

    m = zoo.load("workdirs/demo/cells/mlm")   # an Orbax workdir
    m = zoo.load("path/to/hf_folder")          # a Hugging Face model folder
    m.model, m.params, m.config, m.tokenizer, m.step
    m.embed(["a sentence", ...])["hidden"]      # [B, T, D]
    m.fill_mask("the <mask> sat on the mat")     # encoders with an LM head
    m.generate("translate: ...")                 # decoders, encoder-decoders
    m.score(["a sentence", ...])                 # [N] log-likelihoods

A workdir's params are restored replicated over the local devices, whatever
mesh (and however many processes) saved them. Its latest complete
checkpoint is used; a checkpoint that fails to restore (a corrupt file) is
reported and the previous complete one is tried. Nothing unpickles.
"""

import dataclasses
import functools
import os
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

import objectives
from data import tokenizer as tok_lib
from zoo import checkpoint as ckpt_lib
from zoo import generate as gen_lib
from zoo import models
from zoo import rows as rows_lib
from zoo import scoring
from zoo import train_lib
from zoo.models import blocks
from zoo.models import interface_of

MASK_MARKERS = rows_lib.MASK_MARKERS


@dataclasses.dataclass
class Loaded:
  """A model ready to call.

  Attributes:
    family: model family name (`zoo.models.FAMILIES`).
    config: the family's `Config`.
    params: the model's params (unboxed float32 jax Arrays).
    tokenizer: the zoo tokenizer it was trained with (None if unknown).
    step: the checkpoint's step (None for a Hugging Face folder).
    path: where it was loaded from.
    run_config: the training config of a workdir (None otherwise).
    companions: other networks the scheme trained beside the backbone, name
      -> `(family, config, params)` (ELECTRA's "generator").
    objective: the pre-training scheme (None if unknown); `score` reads an
      encoder-decoder in that scheme's format.
    heads: the scheme's own trained heads, name -> params (ERNIE's "dea"
      head and "entities" table, which `entity_logits` reads).
  """
  family: str
  config: Any
  params: Any
  tokenizer: Any
  step: int | None
  path: str
  run_config: dict | None = None
  companions: dict[str, tuple] = dataclasses.field(default_factory=dict)
  objective: str | None = None
  heads: dict[str, Any] = dataclasses.field(default_factory=dict)

  @property
  def model(self) -> nn.Module:
    """The linen module; `model.apply({"params": params}, ...)`."""
    return models.get(self.family).Model(self.config)

  @property
  def interface(self) -> str:
    """"encoder", "decoder", "encdec" or "lstm"."""
    return interface_of(self.family, self.config)

  def _tok(self):
    if self.tokenizer is None:
      raise ValueError(f"{self.path} came without a tokenizer (no "
                       "tokenizer/, vocab.txt or spm.model); set .tokenizer")
    return self.tokenizer

  def ids(self, text: str) -> list[int]:
    """The ids a text is fed as (`rows.text_row`)."""
    return rows_lib.text_row(self._tok(), text, self._reads_sentences)[0]

  @property
  def _reads_sentences(self) -> bool:
    return models.reads_sentences(self.family, self.config)

  def _rows(self, texts: list[str], max_len: int | None):
    """(ids int32 [B,T] right-padded, T the longest or `max_len`; their
    sentence numbers [B,T], 0 on padding, or None unless the family reads
    sentence by sentence), from one pass over the texts."""
    rows = [rows_lib.text_row(self._tok(), t, self._reads_sentences)
            for t in texts]
    length = max_len or max(len(ids) for ids, _ in rows)
    limit = getattr(self.config, "max_len", None)
    if limit is not None and length > limit:
      raise ValueError(f"{length} ids exceed the {self.family} position "
                       f"table ({limit}); pass a shorter max_len")
    tokens = rows_lib.pad([ids for ids, _ in rows], length, self.config.pad_id)
    if not self._reads_sentences:
      return tokens, None
    return tokens, rows_lib.pad([n for _, n in rows], length, 0)

  def batch(self, texts: list[str], max_len: int | None = None) -> np.ndarray:
    """int32 [B,T] right-padded ids of `texts` (T: the longest, or max_len)."""
    return self._rows(list(texts), max_len)[0]

  def sentence_ids(self, texts: list[str], length: int) -> np.ndarray | None:
    """int32 [B,T] sentence numbers of `batch(texts, length)`'s rows (0 on
    padding) for a family that reads sentence by sentence
    (`models.reads_sentences`), else None."""
    return self._rows(list(texts), length)[1]

  def embed(self, texts: list[str], max_len: int | None = None
            ) -> dict[str, np.ndarray]:
    """Contextual vectors of every piece.

    Returns:
      "hidden" float32 [B,T,D] (encoder side for encoder-decoders),
      "layers" float32 [L+1,B,T,D], "tokens" int32 [B,T], "mask" bool [B,T]
      (real pieces), "mean" float32 [B,D] and "layers_mean" float32
      [L+1,B,D]: `hidden` and `layers` averaged over the real pieces.
    """
    tokens, sentences = self._rows(list(texts), max_len)
    out = _embed(self.family, self.config, self.params, jnp.asarray(tokens),
                 None if sentences is None else jnp.asarray(sentences))
    out = {k: np.asarray(v) for k, v in jax.device_get(out).items()}
    mask = tokens != self.config.pad_id
    return dict(out, tokens=tokens, mask=mask,
                mean=_masked_mean(out["hidden"], mask),
                layers_mean=_masked_mean(out["layers"], mask))

  def word_vector(self, word: str, text: str | None = None) -> np.ndarray:
    """The vector of `word`: float32 [D] in `text` (the mean of its pieces'
    last hidden states, first occurrence), or without `text` its
    context-free vector, float32 [E] (`static_vector`)."""
    if text is None:
      return self.static_vector(word)
    tokens = self.ids(text)
    start, n = rows_lib.find(tokens, self._tok().encode(" " + word), word, text)
    hidden = self.embed([text])["hidden"][0]
    return hidden[start:start + n].mean(0)

  def static_vector(self, word: str) -> np.ndarray:
    """float32 [E]: the mean of `word`'s rows of the token embedding table
    (the same in every context; a word2vec or FastText model's vectors)."""
    table = np.asarray(embedding_table(self.params, self.config.vocab_size))
    return table[self._tok().encode(" " + word)].mean(0)

  def most_similar(self, word: str, top_k: int = 10
                   ) -> list[tuple[str, float]]:
    """The `top_k` pieces whose context-free vectors are nearest `word`'s
    by cosine, best first, as (text, cosine); special pieces and the
    word's own are left out."""
    tok = self._tok()
    table = np.asarray(embedding_table(self.params, self.config.vocab_size),
                       np.float64)
    query = self.static_vector(word).astype(np.float64)
    norms = np.linalg.norm(table, axis=1) * np.linalg.norm(query)
    cos = table @ query / np.maximum(norms, 1e-12)
    skip = set(tok.encode(" " + word)) | set(tok.specials().values())
    pieces = tok.pieces()
    out = []
    for i in np.argsort(-cos):
      if int(i) not in skip and not pieces[i].startswith("<"):
        out.append((pieces[i].replace("\u2581", " ").strip(), float(cos[i])))
      if len(out) == top_k:
        break
    return out

  def context_probe(self, word: str, texts: list[str]) -> dict[str, Any]:
    """How `word`'s vector changes with its context.

    Returns:
      "contextual" float32 [N,D] (`word_vector` in each of the N texts),
      "cosine" float32 [N,N] their cosine similarities, and "static"
      float32 [E], the one table vector every context shares (whose cosine
      matrix would be all ones).
    """
    vecs = np.stack([self.word_vector(word, t) for t in texts])
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    return {"contextual": vecs, "cosine": unit @ unit.T,
            "static": self.static_vector(word)}

  def fill_mask(self, text: str, top_k: int = 5) -> list[list[tuple]]:
    """The `top_k` pieces for each `<mask>` of `text`, best first.

    Returns:
      One list per mask: `(piece text, probability)` pairs.
    """
    if self.interface not in ("encoder",):
      raise ValueError(f"fill_mask needs an encoder with an LM head; "
                       f"{self.family} is an {self.interface}")
    tokens = self.batch([text])
    mask_id = self._tok().specials()["mask"]
    where = np.flatnonzero(tokens[0] == mask_id)
    if not len(where):
      raise ValueError(f"no mask in {text!r}; write one of {MASK_MARKERS}")
    logits = _forward(self.family, self.config, self.params,
                     jnp.asarray(tokens), self.entity_vectors(tokens))
    if logits.ndim != 3 or logits.shape[-1] != self.config.vocab_size:
      raise ValueError(f"{self.family}'s logits {logits.shape} are not over "
                       "the vocabulary (an ELECTRA discriminator scores "
                       "replaced pieces); fill_mask needs an MLM head")
    probs = np.asarray(jax.nn.softmax(logits[0, where], axis=-1))
    out = []
    for row in probs:
      best = np.argsort(-row)[:top_k]
      out.append([(self._tok().decode([int(i)]), float(row[i]))
                  for i in best])
    return out

  def mask_logits(self, texts: list[str], batch_size: int = 64
                  ) -> np.ndarray:
    """float32 [N, V]: the MLM logits at the one mask of each text."""
    out = []
    for start in range(0, len(texts), batch_size):
      tokens = self.batch(list(texts[start:start + batch_size]))
      rows, cols = self._mask_positions(tokens)
      logits = _forward(self.family, self.config, self.params,
                       jnp.asarray(tokens), self.entity_vectors(tokens))
      out.append(np.asarray(logits)[rows, cols])
    return np.concatenate(out)

  def _mask_positions(self, tokens: np.ndarray):
    """(rows, cols) of the one mask of each row."""
    rows, cols = np.nonzero(tokens == self._tok().specials()["mask"])
    if len(rows) != len(tokens) or len(set(rows)) != len(tokens):
      raise ValueError("one mask is needed in each text")
    return rows, cols

  def entity_logits(self, texts: list[str], candidates: np.ndarray,
                    batch_size: int = 64) -> np.ndarray:
    """float32 [N, C]: ERNIE's dEA logits at the one mask of each text for
    the candidate entities (int [C]: entity numbers of the workdir's
    knowledge base), the text's own linked entities read as in training.

    Raises:
      ValueError: the model has no dEA head (not an ERNIE workdir).
    """
    if "dea" not in self.heads:
      raise ValueError(f"{self.path} has no dEA head: entity_logits needs "
                       "an ERNIE workdir trained with the 'ernie' scheme")
    from objectives import ernie  # pylint: disable=g-import-not-at-top
    table = jnp.asarray(self.heads["entities"])
    vectors = table[jnp.asarray(candidates) + 1]
    out = []
    for start in range(0, len(texts), batch_size):
      tokens = self.batch(list(texts[start:start + batch_size]))
      rows, cols = self._mask_positions(tokens)
      hidden = _forward(self.family, self.config, self.params,
                        jnp.asarray(tokens), self.entity_vectors(tokens),
                        "hidden")
      out.append(np.asarray(ernie.dea_scores(
          self.heads["dea"], self.config, hidden[rows, cols], vectors)))
    return np.concatenate(out)

  def entity_vectors(self, tokens: np.ndarray):
    """[B,T,E] float32: for a knowledgeable family (ERNIE), the vectors of
    the entities linked in the rows (`data.linking`, at each mention's
    first piece; the workdir's `data.entities`): rows of the table it was
    trained with, else of the TransE table; None for other families."""
    if not hasattr(self.config, "entity_dim"):
      return None
    from zoo import knowledge  # pylint: disable=g-import-not-at-top
    kb = ((self.run_config or {}).get("data", {}).get("entities")
          or "wordnet")
    return jnp.asarray(knowledge.entity_inputs(
        self._tok(), tokens, kb, self.config.entity_dim,
        self.heads.get("entities")))

  def generate(self, text: str, max_len: int = 32) -> str:
    """Greedy continuation (decoders) or target (encoder-decoders)."""
    tok, face = self._tok(), self.interface
    eos = tok.specials()["eos"]
    prompt = jnp.asarray(self.batch([text]))
    kw = dict(family=self.family, config=self.config, max_len=max_len,
              eos_id=eos)
    if face == "encdec":
      start = getattr(self.config, "decoder_start_id", self.config.pad_id)
      ids = gen_lib.greedy_encdec(self.params, prompt, start_id=start, **kw)
    elif face == "decoder":
      ids = gen_lib.greedy_decoder(self.params, prompt[:, :-1], **kw)
    else:
      raise ValueError(f"generate needs a decoder or an encoder-decoder; "
                       f"{self.family} is an {face}")
    return tok.decode(gen_lib.trim(ids, eos)[0])

  def score(self, texts: list[str], batch_size: int = 64,
            how: str | None = None) -> np.ndarray:
    """float32 [N]: each text's log-likelihood by the family's natural
    scoring (`zoo.scoring`; `self.scoring_method` names it, `how` another
    of an encoder-decoder's methods, to read it as another scheme's model
    is read).

    Texts are scored `batch_size` at a time, grouped by length; a text's
    score does not depend on the texts batched with it.

    Raises:
      ValueError: the family has no natural sentence score.
    """
    texts = list(texts)
    how = how or self.scoring_method
    specials = self._tok().specials()
    order = np.argsort([len(t) for t in texts], kind="stable")
    out = np.zeros(len(texts), np.float32)
    for start in range(0, len(texts), batch_size):
      idx = order[start:start + batch_size]
      tokens = self.batch([texts[i] for i in idx])
      out[idx] = scoring.score(self.family, self.config, self.params, tokens,
                               specials, how)
    return out

  @property
  def scoring_method(self) -> str:
    """How `score` reads a text (`zoo.scoring.method`).

    Raises:
      ValueError: the family has no natural sentence score.
    """
    return scoring.method(self.family, self.config, self.objective)


def embedding_table(params, vocab_size: int):
  """The [V, E] token embedding table of a params tree."""
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  tables = [(jax.tree_util.keystr(p), x) for p, x in flat
            if x.ndim == 2 and x.shape[0] == vocab_size]
  named = [x for p, x in tables if "embed" in p.lower() or "token" in p]
  if not tables:
    raise ValueError(f"no [{vocab_size}, E] embedding table in the params")
  return (named or [x for _, x in tables])[0]


@functools.partial(jax.jit, static_argnames=("family", "config"))
def _embed(family, config, params, tokens, segment_ids=None):
  """hidden [B,T,D] and layers [L+1,B,T,D] of the model's reading side
  (`segment_ids` [B,T]: the sentence numbers of a family that reads
  sentence by sentence)."""
  model = models.get(family).Model(config)
  face = interface_of(family, config)
  if face == "encdec":
    out = model.apply({"params": params}, tokens, method="encode")
    return {"hidden": out["encoder_hidden"],
            "layers": jnp.stack(out["encoder_layers"])}
  kw = {} if face == "lstm" else {"return_logits": False}
  if segment_ids is not None:
    kw["segment_ids"] = segment_ids
  out = model.apply({"params": params}, tokens, **kw)
  return {"hidden": out["hidden"], "layers": jnp.stack(out["layers"])}


@functools.partial(jax.jit, static_argnames=("family", "config", "key"))
def _forward(family, config, params, tokens, entities=None, key="logits"):
  """An encoder's output `key`: "logits" [B,T,V] or "hidden" [B,T,D]
  (`entities` [B,T,E]: ERNIE's linked entity vectors)."""
  model = models.get(family).Model(config)
  kw = {} if entities is None else {"entities": entities}
  out = model.apply({"params": params}, tokens, **kw)
  if key not in out:
    raise ValueError(f"{family} returns no {key} (fill_mask and mask_logits "
                     "need an LM head)")
  return out[key]


def _is_workdir(path: str) -> bool:
  return os.path.isdir(os.path.join(path, "checkpoints"))


def _masked_mean(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
  """[..., B, T, D] averaged over the True pieces of mask [B, T] ->
  [..., B, D] float32 (a row without real pieces gives zeros)."""
  w = mask[..., None].astype(np.float32)
  return ((x * w).sum(-2) / np.maximum(w.sum(-2), 1.0)).astype(np.float32)


def load_workdir(workdir: str, step: int | None = None) -> Loaded:
  """A `Loaded` from a run's workdir (its backbone, as fine-tuning sees it)."""
  config = ml_collections.ConfigDict(ckpt_lib.read_config(workdir))
  tok_dir = os.path.join(workdir, "tokenizer")
  tokenizer = tok_lib.load_path(tok_dir) if os.path.isdir(tok_dir) else None
  specials = (objectives.Specials(**tokenizer.specials()) if tokenizer
              else train_lib.specials_of(config, None))
  params, step = ckpt_lib.restore_params(workdir, step)
  if ("scan_layers" not in config.get("model_args", {})
      and blocks.is_unrolled(params)):
    # Trained before deep stacks scanned by default: build it as trained.
    config.model_args = dict(config.get("model_args", {}), scan_layers=False)
  objective = train_lib.build_objective(config, specials, tokenizer)
  family, model_config, backbone = objective.backbone(params)
  companions = ({"generator": objective.generator(params)}
                if hasattr(objective, "generator") else {})
  return Loaded(family, model_config, backbone, tokenizer, step, workdir,
                config.to_dict(), companions, config.get("objective") or None,
                objective.heads(params))


def load_hf(folder: str) -> Loaded:
  """A `Loaded` from a Hugging Face folder (config.json + safetensors)."""
  from zoo import convert  # pylint: disable=import-outside-toplevel
  family, config, params = convert.from_hf(folder)
  try:
    tokenizer = tok_lib.load_path(folder)
  except FileNotFoundError:
    tokenizer = None
  rep = jax.sharding.NamedSharding(ckpt_lib.local_mesh(),
                                   jax.sharding.PartitionSpec())
  params = jax.device_put(nn.meta.unbox(params), rep)
  return Loaded(family, config, params, tokenizer, None, folder)


class Teacher:
  """A trained model a distillation scheme learns from, read on first use.

  `family`, `config` and `params` are those of `load(path)`: the teacher's
  backbone as fine-tuning sees it. Nothing is read until one of them is
  asked for, so loading a distilled student (`load` of its workdir, which
  needs only the student) never touches the teacher's path.
  """

  def __init__(self, path: str):
    self.path = os.fspath(path)

  @functools.cached_property
  def loaded(self) -> Loaded:
    """The teacher's `Loaded` (read once)."""
    try:
      # First asked for while a scheme's init is traced: read eagerly.
      with jax.ensure_compile_time_eval():
        return load(self.path)
    except FileNotFoundError as e:
      raise FileNotFoundError(f"the distillation teacher {self.path!r} "
                              f"cannot be read: {e}") from None

  @property
  def family(self) -> str:
    return self.loaded.family

  @property
  def config(self):
    return self.loaded.config

  @property
  def params(self):
    return self.loaded.params

  def __repr__(self) -> str:
    return f"Teacher({self.path!r})"


def load(path, step: int | None = None) -> Loaded:
  """An Orbax workdir or a Hugging Face model folder, ready to call.

  Args:
    path: a workdir (config.json and checkpoints/) or a Hugging Face folder
      (config.json and *.safetensors).
    step: a workdir checkpoint; None = the latest that restores.
  """
  path = os.fspath(path)
  if not os.path.isdir(path):
    raise FileNotFoundError(f"{path} is not a directory")
  if _is_workdir(path):
    return load_workdir(path, step)
  if os.path.exists(os.path.join(path, "config.json")):
    if step is not None:
      raise ValueError("step applies to workdirs, not Hugging Face folders")
    return load_hf(path)
  raise FileNotFoundError(f"{path} is neither a workdir (checkpoints/) nor a "
                          "Hugging Face folder (config.json)")
