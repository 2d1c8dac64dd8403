"""Checks shared by the encoder-decoder model tests (not a test module)."""

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from tests.fast_params import fast_params
from zoo import sharding
from zoo.models import make

B, S, T = 4, 9, 7  # B divisible by the mesh's data x fsdp
MESH = {"data": 2, "fsdp": 2, "tensor": 2}


def ids(seed, shape, low=7, high=400):
  """Random int32 token ids avoiding the special ids."""
  return jax.random.randint(jax.random.key(seed), shape, low, high, jnp.int32)


def build(family, **overrides):
  """(config, model, run, params) at tiny with dropout off.

  `run(params, enc, dec, enc_seg=None, dec_seg=None, enc_pos=None,
  dec_pos=None)` is one jitted forward that always passes every input, so
  all calls at [B,S] x [B,T] share one compilation.
  """
  cfg, model = make(family, "tiny", dropout_rate=0.0, **overrides)
  params = fast_params(model, ids(0, (B, S)), ids(1, (B, T)))
  fwd = jax.jit(lambda p, e, d, es, ds, ep, dp: model.apply(
      p, e, d, enc_segment_ids=es, dec_segment_ids=ds, enc_positions=ep,
      dec_positions=dp))

  def run(p, enc, dec, enc_seg=None, dec_seg=None, enc_pos=None,
          dec_pos=None):
    if enc_seg is None:
      enc_seg = (enc != cfg.pad_id).astype(jnp.int32)
    if dec_seg is None:
      dec_seg = jnp.ones(dec.shape, jnp.int32)
    arange = lambda x: jnp.broadcast_to(jnp.arange(x.shape[1]), x.shape)
    enc_pos = arange(enc) if enc_pos is None else enc_pos
    dec_pos = arange(dec) if dec_pos is None else dec_pos
    return fwd(p, enc, dec, enc_seg, dec_seg, enc_pos, dec_pos)

  return cfg, model, run, params


def assert_output_shapes(cfg, out):
  """Every named output of an encoder-decoder call has its shape."""
  d, v = cfg.embed_dim, cfg.vocab_size
  n_dec = (cfg.num_decoder_layers or cfg.num_layers) + 1
  chex.assert_shape(out["logits"], (B, T, v))
  chex.assert_shape(out["hidden"], (B, T, d))
  chex.assert_shape(out["encoder_hidden"], (B, S, d))
  chex.assert_shape(list(out["layers"]), [(B, T, d)] * n_dec)
  chex.assert_shape(list(out["encoder_layers"]),
                    [(B, S, d)] * (cfg.num_layers + 1))
  chex.assert_type(jax.tree.leaves(out), jnp.float32)
  chex.assert_tree_all_finite(out)


def assert_valid_logical_axes(model, *args):
  """Every param is boxed with logical names that the default rules place."""
  abstract = jax.eval_shape(model.init, jax.random.key(0), *args)
  is_box = lambda x: isinstance(x, nn.LogicallyPartitioned)
  leaves = jax.tree.leaves(abstract, is_leaf=is_box)
  unboxed = [x for x in leaves if not is_box(x)]
  assert leaves and not unboxed, f"params without logical axes: {unboxed}"
  mesh = sharding.make_mesh(MESH)
  specs = sharding.logical_shardings(abstract, mesh, sharding.DEFAULT_RULES)
  assert len(jax.tree.leaves(specs)) == len(leaves)
  # The big tables really are split, not silently replicated.
  flat = jax.tree_util.tree_flatten_with_path(specs)[0]
  assert any("tensor" in str(s.spec) for _, s in flat)


def sharded_apply(model, params, *args, **kw):
  """The forward with params and inputs placed on the 8-device mesh."""
  mesh = sharding.make_mesh(MESH)
  rules = sharding.DEFAULT_RULES
  placed = jax.device_put(nn.meta.unbox(params),
                          sharding.logical_shardings(params, mesh, rules))
  inputs = [jax.device_put(a, sharding.batch_sharding(mesh, rules))
            for a in args]
  with sharding.activate(mesh, rules):
    return jax.jit(model.apply)(placed, *inputs, **kw)


def _row(*parts):
  """One [1, L] int32 row from lists."""
  return jnp.array([sum(parts, [])], jnp.int32)


def assert_packing_is_exact(run, params):
  """Two documents packed in one row give the states each gives alone.

  Rows 0 and 2 pack documents a (enc 5, dec 4) and b (enc 4, dec 3),
  positions restarting per document as the packer emits them; rows 1 and
  3 hold a and b alone, padded.
  """
  enc = {"a": ids(3, (1, 5)), "b": ids(4, (1, 4))}
  dec = {"a": ids(5, (1, 4)), "b": ids(6, (1, 3))}
  packed = dict(
      enc=jnp.concatenate([enc["a"], enc["b"]], 1),
      dec=jnp.concatenate([dec["a"], dec["b"]], 1),
      enc_seg=_row([1] * 5, [2] * 4), dec_seg=_row([1] * 4, [2] * 3),
      enc_pos=_row(list(range(5)), list(range(4))),
      dec_pos=_row(list(range(4)), list(range(3))))
  rows = []
  for doc in ("a", "b"):
    ns, nt = enc[doc].shape[1], dec[doc].shape[1]
    rows += [packed, dict(
        enc=_pad(enc[doc], S), dec=_pad(dec[doc], T),
        enc_seg=_row([1] * ns, [0] * (S - ns)),
        dec_seg=_row([1] * nt, [0] * (T - nt)),
        enc_pos=_row(list(range(S))), dec_pos=_row(list(range(T))))]
  batch = {k: jnp.concatenate([r[k] for r in rows], 0) for k in packed}
  out = run(params, batch["enc"], batch["dec"], batch["enc_seg"],
            batch["dec_seg"], batch["enc_pos"], batch["dec_pos"])
  spans = {"a": ((0, 5), (0, 4), 0), "b": ((5, 9), (4, 7), 2)}
  for doc, ((s0, s1), (t0, t1), row) in spans.items():
    for key, (lo, hi) in (("hidden", (t0, t1)), ("logits", (t0, t1)),
                          ("encoder_hidden", (s0, s1))):
      np.testing.assert_allclose(out[key][row, lo:hi],
                                 out[key][row + 1, :hi - lo], atol=1e-5,
                                 err_msg=f"document {doc}, {key}")


def _pad(x, length):
  return jnp.pad(x, ((0, 0), (0, length - x.shape[1])))


def assert_decoder_is_causal(run, params):
  """Changing decoder tokens after t leaves outputs at <= t unchanged."""
  enc, dec = ids(7, (B, S)), ids(8, (B, T))
  t = 3
  changed = dec.at[:, t + 1:].set(ids(9, (B, T))[:, t + 1:])
  out, out2 = run(params, enc, dec), run(params, enc, changed)
  np.testing.assert_allclose(out["logits"][:, :t + 1],
                             out2["logits"][:, :t + 1], atol=1e-6)
  assert np.abs(out["logits"][:, t + 1:] - out2["logits"][:, t + 1:]).max() > 1e-4


def assert_encoder_padding_ignored(run, params, pad_id):
  """Padded encoder positions (their ids, too) never reach the decoder."""
  enc, dec = ids(10, (B, S)), ids(11, (B, T))
  seg = jnp.ones((B, S), jnp.int32).at[1, 6:].set(0)
  enc = jnp.where(seg == 1, enc, pad_id)
  other = jnp.where(seg == 1, enc, ids(12, (B, S)))
  out = run(params, enc, dec, seg)
  out2 = run(params, other, dec, seg)
  np.testing.assert_allclose(out["logits"], out2["logits"], atol=1e-5)


def assert_encode_decode_methods(model, run, params, pad_id):
  """`encode` then `decode`, and the one-call forward with default segments
  (padding read off pad_id), reproduce the explicit forward."""
  seg = jnp.ones((B, S), jnp.int32).at[0, 7:].set(0)
  enc = jnp.where(seg == 1, ids(13, (B, S)), pad_id)
  dec = ids(14, (B, T))
  want = run(params, enc, dec, seg)
  full = model.apply(params, enc, dec)
  e = model.apply(params, enc, method="encode")
  d = model.apply(params, dec, e["encoder_hidden"], enc_segment_ids=seg,
                  method="decode")
  for got in (full, dict(d, **e)):
    for key in ("logits", "encoder_hidden"):
      np.testing.assert_allclose(got[key], want[key], atol=1e-5)
