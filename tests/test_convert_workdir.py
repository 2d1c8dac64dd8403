"""A Hugging Face folder becomes a workdir the trainer resumes and
`zoo.load` reads (`zoo.convert.workdir`, `configs/workdir.py`)."""

import json
import logging

import jax
import numpy as np
import pytest
import transformers
from absl import flags
from ml_collections import config_flags

import zoo
from zoo import checkpoint as ckpt_lib
from zoo import config as config_lib
from zoo import convert
from zoo import train as train_mod
from zoo.convert import __main__ as cli
from zoo.convert import common
from zoo.convert import workdir as workdir_lib

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64)


def _save_bert(folder, vocab_size: int) -> None:
  import torch  # pylint: disable=import-outside-toplevel
  torch.manual_seed(0)
  model = transformers.BertForMaskedLM(
      transformers.BertConfig(vocab_size=vocab_size, **TINY))
  model.save_pretrained(str(folder), safe_serialization=True)


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory, tok):
  """A tiny BertForMaskedLM over the sample's tokenizer, saved with it."""
  folder = tmp_path_factory.mktemp("hf_bert")
  _save_bert(folder, tok.vocab_size)
  tok.save(folder)
  return folder


def _config_from_flags(workdir, *overrides):
  """`--config configs/workdir.py:WORKDIR --config.K=V ...` as absl parses."""
  argv = ["train", f"--config=configs/workdir.py:{workdir}", *overrides]
  values = flags.FlagValues()
  holder = config_flags.DEFINE_config_file(
      "config", None, "config", flag_values=values, lock_config=True,
      sys_argv=argv)
  values(argv)
  return holder.value


def _flat(params) -> dict[str, np.ndarray]:
  return {k: np.asarray(v) for k, v in common.flat(dict(params)).items()}


def test_imported_workdir_loads_bitwise_and_resumes_training(
    hf_folder, tmp_path, capsys, caplog):
  workdir = str(tmp_path / "run")
  with caplog.at_level(logging.INFO):
    out = workdir_lib.hf_to_workdir(hf_folder, workdir, seq_len=32)
  assert out == workdir
  assert "pooler/kernel" in caplog.text  # not in an MLM checkpoint: fresh

  saved = ckpt_lib.read_config(workdir)
  assert (saved["model"], saved["objective"]) == ("bert", "mlm")
  assert saved["data"]["tokenizer"] == str(tmp_path / "run" / "tokenizer")
  assert saved["data"]["vocab_size"] == 8000
  args = saved["model_args"]
  assert (args["embed_dim"], args["num_layers"], args["max_len"]) == (
      32, 2, 64)
  assert args["scan_layers"] is False
  assert not {"vocab_size", "dtype", "nsp_head"} & set(args)

  family, hf_config, hf_params = convert.from_hf(hf_folder)
  loaded = zoo.load(workdir)
  assert (loaded.family, loaded.step) == (family, 0)
  assert loaded.config.embed_dim == hf_config.embed_dim
  mine, theirs = _flat(loaded.params), _flat(hf_params)
  # from_hf keeps the NSP head BERT configs declare; MLM has none.
  assert set(theirs) - set(mine) == {"nsp/kernel", "nsp/bias"}
  assert set(mine) <= set(theirs)
  for key, value in mine.items():
    if not key.startswith("pooler/"):  # the checkpoint has no pooler
      assert value.dtype == theirs[key].dtype, key
      assert np.array_equal(value, theirs[key]), key

  config = _config_from_flags(workdir, "--config.steps=2",
                              "--config.eval_steps=0",
                              "--config.optimizer.lr=1e-2")
  assert isinstance(config.optimizer.lr, float) and config.steps == 2
  capsys.readouterr()
  final = train_mod.train(config, workdir)
  assert "resumed from step 0" in capsys.readouterr().err
  assert final["step"] == 2 and np.isfinite(final["loss"])

  after = zoo.load(workdir)
  assert after.step == 2
  moved = _flat(after.params)
  assert set(moved) == set(mine)
  table = "embeddings/token/embedding"
  assert not np.array_equal(moved[table], mine[table])
  assert max(np.abs(moved[k] - mine[k]).max() for k in mine) > 1e-4

  with pytest.raises(FileExistsError, match="already holds"):
    workdir_lib.hf_to_workdir(hf_folder, workdir)


def test_workdir_config_keeps_the_default_types(tmp_path):
  config = config_lib.base_config()
  config.model, config.objective = "bert", "mlm"
  text = json.loads(config.to_json())
  text["optimizer"]["lr"] = 1  # JSON writes a whole float as an int
  text["model_args"] = {"dropout_rate": 0.0, "num_layers": 2}
  ckpt_lib.write_config(str(tmp_path), text)
  loaded = _config_from_flags(
      str(tmp_path), "--config.optimizer.end_lr_ratio=0",
      "--config.data.shuffle_seed=3", "--config.model_args.num_layers=4",
      "--config.seq_len=64")
  assert isinstance(loaded.optimizer.lr, float) and loaded.optimizer.lr == 1.0
  assert isinstance(loaded.optimizer.end_lr_ratio, float)
  assert loaded.data.shuffle_seed == 3
  assert loaded.model_args.num_layers == 4 and loaded.seq_len == 64
  assert loaded.rules[0] == ("batch", ("data", "fsdp"))
  config_lib.complete(loaded)  # the trainer's typed view accepts it


def test_electra_is_refused(tmp_path, tok):
  model = transformers.ElectraForPreTraining(transformers.ElectraConfig(
      vocab_size=tok.vocab_size, embedding_size=16, **TINY))
  model.save_pretrained(str(tmp_path / "hf"), safe_serialization=True)
  tok.save(tmp_path / "hf")
  with pytest.raises(ValueError, match="generator and a discriminator"):
    workdir_lib.hf_to_workdir(tmp_path / "hf", tmp_path / "run")
  assert not (tmp_path / "run").exists()


def test_folder_without_tokenizer_is_refused(tmp_path):
  _save_bert(tmp_path / "hf", 120)
  with pytest.raises(FileNotFoundError, match="no tokenizer the zoo reads"):
    workdir_lib.hf_to_workdir(tmp_path / "hf", tmp_path / "run")
  assert not (tmp_path / "run").exists()


def test_rows_longer_than_the_position_table_are_refused(hf_folder,
                                                         tmp_path):
  with pytest.raises(ValueError, match="seq_len 128 exceeds the 64"):
    workdir_lib.hf_to_workdir(hf_folder, tmp_path / "run", seq_len=128)
  with pytest.raises(ValueError, match="vocab_size"):
    workdir_lib.hf_to_workdir(hf_folder, tmp_path / "run",
                              model_args={"vocab_size": 9000})
  assert not (tmp_path / "run" / "config.json").exists()


def _params(shapes: dict[str, tuple]):
  return {k: jax.numpy.zeros(s, jax.numpy.float32) for k, s in shapes.items()}


def test_place_takes_checks_cuts_and_reports(caplog):
  model = {"embed": {"table": None}, "head": _params({"bias": (6,)})}
  model["embed"]["table"] = jax.numpy.zeros((6, 2), jax.numpy.float32)
  ckpt = {"embed": {"table": np.arange(16, dtype=np.float32).reshape(8, 2)},
          "nsp": {"kernel": np.ones((2, 2), np.float32)}}
  with caplog.at_level(logging.INFO):
    out = workdir_lib.place(model, ckpt, hf_vocab=8, vocab=6)
  np.testing.assert_array_equal(out["embed"]["table"],
                                np.arange(12).reshape(6, 2))
  np.testing.assert_array_equal(out["head"]["bias"], np.zeros(6))
  assert "dropped: ['nsp/kernel']" in caplog.text
  assert "fresh init: ['head/bias']" in caplog.text

  ckpt["embed"]["table"] = np.zeros((6, 3), np.float32)
  with pytest.raises(ValueError, match=r"embed/table: checkpoint \(6, 3\)"):
    workdir_lib.place(model, ckpt, hf_vocab=6, vocab=6)


def test_cli_from_hf_writes_a_step_0_workdir(hf_folder, tmp_path, capsys):
  out = str(tmp_path / "cli")
  cli.main(["--from", "hf", str(hf_folder), out, "--objective", "mlm"])
  assert capsys.readouterr().out.strip() == out
  assert ckpt_lib.read_config(out)["objective"] == "mlm"
  assert zoo.load(out).step == 0
