"""Hugging Face import: parity with transformers (PyTorch) and refusals."""

import json

import jax
import numpy as np
import pytest
import torch
import transformers

from tests import hf_parity as hp
from zoo import convert

torch.manual_seed(0)
SMALL = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2,
             num_attention_heads=4, intermediate_size=37,
             attn_implementation="eager")


def _check(folder, model, *, pad, logits_attr="logits", **zoo_kw):
  ids, mask = hp.padded_ids(99, pad)
  ref = hp.run_torch(model, ids, mask)
  family, config, out = hp.run_zoo(folder, ids, mask, **zoo_kw)
  assert hp.max_diff(out["hidden"], ref.hidden_states[-1], mask) < hp.TOL
  assert len(out["layers"]) == len(ref.hidden_states)
  assert hp.max_diff(out["logits"], getattr(ref, logits_attr), mask) < hp.TOL
  return family, config, out, ref


def test_bert_pretraining_parity(tmp_path):
  model = transformers.BertForPreTraining(transformers.BertConfig(**SMALL))
  folder = hp.save(model, tmp_path)
  family, _, out, ref = _check(folder, model, pad=0,
                               logits_attr="prediction_logits")
  assert family == "bert"
  np.testing.assert_allclose(out["nsp_logits"],
                             ref.seq_relationship_logits.numpy(), atol=1e-5)
  # Every intermediate layer matches too, not only the last.
  _, mask = hp.padded_ids(99, 0)
  for ours, theirs in zip(out["layers"], ref.hidden_states):
    assert hp.max_diff(ours, theirs, mask) < hp.TOL


def test_roberta_mlm_parity(tmp_path):
  cfg = transformers.RobertaConfig(pad_token_id=1, max_position_embeddings=20,
                                   **SMALL)
  model = transformers.RobertaForMaskedLM(cfg)
  family, config, _, _ = _check(hp.save(model, tmp_path), model, pad=1)
  assert family == "roberta" and config.position_offset == 2


def test_gpt2_parity(tmp_path):
  cfg = transformers.GPT2Config(vocab_size=99, n_embd=32, n_layer=2, n_head=4,
                                n_positions=16, attn_implementation="eager")
  model = transformers.GPT2LMHeadModel(cfg)
  family, config, _, _ = _check(hp.save(model, tmp_path), model, pad=0)
  assert family == "gpt2" and config.pad_id == -1


def test_scan_layers_import_matches_unrolled(tmp_path):
  model = transformers.BertModel(transformers.BertConfig(**SMALL))
  folder = hp.save(model, tmp_path)
  ids, mask = hp.padded_ids(99, 0)
  _, _, flat = hp.run_zoo(folder, ids, mask)
  family, config, params = convert.from_hf(folder, scan_layers=True)
  assert config.scan_layers and "layers" in params["encoder"]
  from zoo import models  # pylint: disable=g-import-not-at-top
  out = jax.jit(models.get(family).Model(config).apply)(
      {"params": params}, ids.astype(np.int32), segment_ids=mask)
  np.testing.assert_allclose(out["hidden"], flat["hidden"], atol=1e-5)


def test_pickle_only_folder_is_refused(tmp_path):
  model = transformers.BertModel(transformers.BertConfig(**SMALL))
  model.save_pretrained(str(tmp_path), safe_serialization=False)
  for f in tmp_path.glob("*.safetensors"):
    f.unlink()
  if not list(tmp_path.glob("pytorch_model*.bin")):
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
  with pytest.raises(ValueError, match="safetensors"):
    convert.from_hf(tmp_path)
  family, _, params = convert.from_hf(tmp_path, allow_pickle=True)
  assert family == "bert"
  np.testing.assert_array_equal(
      params["embeddings"]["token"]["embedding"],
      model.embeddings.word_embeddings.weight.detach().numpy())


def test_unknown_architecture_lists_supported(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps(
      {"architectures": ["MysteryModel"], "model_type": "mystery"}))
  with pytest.raises(ValueError, match="BertForMaskedLM"):
    convert.from_hf(tmp_path)


def test_missing_config_and_weights(tmp_path):
  with pytest.raises(FileNotFoundError, match="config.json"):
    convert.from_hf(tmp_path)
  (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
  with pytest.raises(FileNotFoundError, match="no weights"):
    convert.from_hf(tmp_path)


def _mean_pool(hidden, mask):
  mask = np.asarray(mask, np.float32)[..., None]
  return (np.asarray(hidden) * mask).sum(1) / mask.sum(1)


def test_minilm_checkpoint_sentence_embeddings(minilm_folder):
  folder = minilm_folder
  tok = transformers.BertTokenizer(str(folder / "vocab.txt"),
                                   do_lower_case=True)
  sentences = ["The cat sat on the mat.",
               "A quick brown fox jumps over the lazy dog near the river.",
               "Sentence embeddings compare meanings.", "Hello!"]
  enc = tok(sentences, padding=True, return_tensors="np")
  ids, mask = enc["input_ids"], enc["attention_mask"]
  ref_model = transformers.BertModel.from_pretrained(
      str(folder), attn_implementation="eager").eval()
  with torch.no_grad():
    ref = ref_model(torch.tensor(ids), attention_mask=torch.tensor(mask))
  family, _, out = hp.run_zoo(folder, ids, mask, return_logits=False)
  assert family == "bert"
  ours = _mean_pool(out["hidden"], mask)
  theirs = _mean_pool(ref.last_hidden_state.numpy(), mask)
  cos = (ours * theirs).sum(-1) / (np.linalg.norm(ours, axis=-1)
                                   * np.linalg.norm(theirs, axis=-1))
  assert cos.min() >= 0.99999, cos
  assert hp.max_diff(out["hidden"], ref.last_hidden_state, mask) < hp.TOL


def test_distilbert_mlm_parity(tmp_path):
  cfg = transformers.DistilBertConfig(vocab_size=99, dim=32, n_layers=2,
                                      n_heads=4, hidden_dim=37,
                                      attn_implementation="eager")
  model = transformers.DistilBertForMaskedLM(cfg)
  family, _, _, _ = _check(hp.save(model, tmp_path), model, pad=0)
  assert family == "distilbert"


def test_albert_pretraining_parity(tmp_path):
  cfg = transformers.AlbertConfig(embedding_size=16, **SMALL)
  model = transformers.AlbertForPreTraining(cfg)
  family, config, out, ref = _check(hp.save(model, tmp_path), model, pad=0,
                                    logits_attr="prediction_logits")
  assert family == "albert" and config.embedding_dim == 16
  np.testing.assert_allclose(out["sop_logits"], ref.sop_logits.numpy(),
                             atol=1e-5)


@pytest.mark.parametrize("cls", ["ElectraForPreTraining",
                                 "ElectraForMaskedLM"])
def test_electra_parity(tmp_path, cls):
  cfg = transformers.ElectraConfig(embedding_size=16, **SMALL)
  model = getattr(transformers, cls)(cfg)
  family, config, out, _ = _check(hp.save(model, tmp_path), model, pad=0)
  role = "generator" if cls.endswith("MaskedLM") else "discriminator"
  assert family == "electra" and config.role == role
  assert out["logits"].ndim == (3 if role == "generator" else 2)


def test_sharded_safetensors_index_is_read(tmp_path):
  model = transformers.BertModel(transformers.BertConfig(**SMALL))
  model.save_pretrained(str(tmp_path / "one"))
  model.save_pretrained(str(tmp_path / "many"), max_shard_size="20KB")
  assert (tmp_path / "many" / "model.safetensors.index.json").exists()
  assert len(list((tmp_path / "many").glob("*.safetensors"))) > 1
  _, _, one = convert.from_hf(tmp_path / "one")
  _, _, many = convert.from_hf(tmp_path / "many")
  jax.tree.map(np.testing.assert_array_equal, one, many)
