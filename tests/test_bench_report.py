"""Tests of bench/report.py: benchmark JSON lines -> the README section."""

import json
import pathlib
import sys

import pytest

# Appended, not prepended: bench/data.py must not shadow the data package.
sys.path.append(str(pathlib.Path(__file__).resolve().parent.parent / "bench"))
import report  # pylint: disable=g-import-not-at-top,wrong-import-position

pytestmark = pytest.mark.slow  # minutes of training runs: not the quick lane

MACHINE = {"cpu": "Test CPU", "cores": 2, "backend": "cpu", "jax": "9.9",
           "flax": "8.8", "torch": "7.7", "transformers": "6.6",
           "load_avg_1m": 3.5, "load_avg_1m_end": 4.0}


def _row(seconds):
  return {"step_s": seconds, "tokens_per_s": 1024 / seconds,
          "model_tflops_per_step": 0.5, "mfu": 0.5 / seconds / 40}


def _log(tmp_path):
  train = {"bench": "train_step", "machine": MACHINE, "batch": 8,
           "seq_len": 128, "steps": 3,
           "peaks_flops": {"float32": 4e10, "bfloat16": 2e10},
           "results": {"bert-base": {"zoo_float32": _row(2.0),
                                     "hf_float32": _row(5.0)}}}
  attn = {"bench": "attention", "machine": MACHINE, "batch": 1, "heads": 2,
          "head_dim": 64, "dtype": "float32", "backward": False,
          "causal": False, "lengths": [512, 1024],
          "results": {"einsum": {"512": {"seconds": 0.01,
                                         "peak_bytes": 2**20},
                                 "1024": {"seconds": 0.04,
                                          "peak_bytes": 2**22}}},
          "slopes": {"einsum": {"time": 2.0, "mem": 2.0}}}
  path = tmp_path / "bench.log"
  # An earlier record of the same run (same first model): the last counts.
  partial = dict(train, results={"bert-base": {"zoo_float32": _row(9.0)}})
  path.write_text("noise\n" + "".join(
      f"{report.TAG} {json.dumps(r)}\n" for r in (partial, train, attn))
      + "ratios\n")
  return path


def test_section_replaces_only_between_markers(tmp_path):
  readme = tmp_path / "README.md"
  readme.write_text("# Title\n\n<!-- perf:start -->\nold\n<!-- perf:end -->\n"
                    "after\n")
  report.main([str(_log(tmp_path)), "--readme", str(readme)])
  text = readme.read_text()
  assert text.startswith("# Title\n") and text.endswith("after\n")
  assert "old" not in text and "9000.0" not in text
  assert "Test CPU (2 cores" in text and "torch 7.7" in text
  # zoo at 2 s/step vs the reference at 5 s/step: the reference row is 2.50.
  # At the 40 GFLOP/s peak the step's 0.5 TFLOP take 12.5 s at best; the
  # reference's 5 s is 0.40 of that time: the last column.
  assert ("| bert-base | hf_float32 | 5000.0 | 205 | 0.003 | 2.50 | 0.40 |"
          in text)
  assert "| einsum | 1024 | 40.0 | 4.0 |" in text
  assert "einsum: time 2.00, memory 2.00" in text
  assert "_xN" not in text  # no run on several CPU devices


def test_runs_on_several_cpu_devices_are_explained(tmp_path):
  record = json.loads(_log(tmp_path).read_text().splitlines()[2].split(
      " ", 1)[1])
  record["results"]["bert-base"]["zoo_float32_x2"] = _row(1.0)
  text = "\n".join(report.train_step_section(record))
  assert "| bert-base | zoo_float32_x2 | 1000.0 | 1024 |" in text
  assert "| bert-base | zoo_float32 | 2000.0 | 512 | 0.006 | 2.00 |" in text
  assert "`JAX_NUM_CPU_DEVICES=N`" in text


def test_missing_markers_and_records_raise(tmp_path):
  readme = tmp_path / "README.md"
  readme.write_text("no markers\n")
  with pytest.raises(ValueError, match="exactly one"):
    report.main([str(_log(tmp_path)), "--readme", str(readme)])
  empty = tmp_path / "empty.log"
  empty.write_text("nothing here\n")
  with pytest.raises(ValueError, match="no BENCH_JSON"):
    report.read_records([empty])


def test_ratio_line_uses_best_zoo_dtype():
  import train_step  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  results = {"bert-base": {"zoo_float32": _row(4.0), "zoo_bfloat16": _row(2.0),
                           "hf_float32": _row(5.0), "hf_bfloat16": _row(3.0)},
             "gpt2-small": {"zoo_bfloat16": _row(1.0)}}
  line = train_step.ratio_line(results)
  assert line.startswith("bert-base zoo/hf_f32=2.50 zoo/hf_bf16=1.50 | ")
  # Without a reference the line reports the zoo's MFU instead.
  assert line.endswith("gpt2-small zoo_mfu=0.013")


def test_train_step_rejects_unknown_models_and_dtypes():
  import train_step  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  with pytest.raises(SystemExit):
    train_step.parse_args(["--models", "bert-huge"])
  with pytest.raises(SystemExit):
    train_step.parse_args(["--hf_modes", "float16"])
  args = train_step.parse_args(["--models", "t5-small", "--no_hf"])
  assert args.models == ["t5-small"] and args.no_hf
  with pytest.raises(SystemExit):
    train_step.parse_args(["--zoo_cpu_devices", "1,two"])
  with pytest.raises(SystemExit):
    train_step.parse_args(["--zoo_cpu_devices", "0"])


def test_train_step_runs_the_zoo_on_each_cpu_device_count():
  import train_step  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  args = train_step.parse_args(["--zoo_cpu_devices", "1,2"])
  assert args.zoo_cpu_devices == [1, 2]
  assert [train_step.run_label("zoo", "float32", n) for n in (1, 2)] == [
      "zoo_float32", "zoo_float32_x2"]
  assert train_step._env("zoo", 2, args) == {"JAX_NUM_CPU_DEVICES": "2"}  # pylint: disable=protected-access
  assert train_step._env("zoo", 1, args) == {}  # pylint: disable=protected-access
  # The reference keeps glibc's allocator (one process, its own threads).
  assert train_step._env("hf", 1, args) == {"ZOO_HOST_MALLOC": "0"}  # pylint: disable=protected-access


def test_flag_variants_split_into_xla_flags_environment_and_model_args():
  import xla_cpu_flags  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  assert xla_cpu_flags.variant("default") == ("", {}, {})
  assert xla_cpu_flags.variant(
      "--xla_a=1 ZOO_CPU_TRANSPOSE=0 model.relpos_from=positions "
      "model.scan_layers=True") == (
          "--xla_a=1", {"ZOO_CPU_TRANSPOSE": "0"},
          {"relpos_from": "positions", "scan_layers": True})
  with pytest.raises(ValueError, match="relpos_from"):
    xla_cpu_flags.variant("relpos_from")


def test_interleaved_medians_take_turns_after_warmup():
  import _common  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  calls = []
  fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
  medians = _common.interleaved_medians(fns, steps=2, warmup=1, settle=1)
  assert calls == ["a", "b"] + ["a", "a", "b", "b"] * 2
  assert set(medians) == {"a", "b"} and all(m >= 0 for m in medians.values())
  with pytest.raises(ValueError, match="steps"):
    _common.interleaved_medians(fns, steps=0, warmup=0)


def test_worker_steps_a_zoo_run_in_its_own_process():
  import _workers  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  spec = {"name": "t5-small", "dtype": "float32", "batch": 2, "seq_len": 16,
          "size": "tiny", "model_args": {}}
  worker = _workers.Worker("zoo", spec, warmup=1)
  try:
    assert worker.label == "zoo_float32" and worker.info["flops"] > 0
    assert worker.step() > 0
  finally:
    worker.close()
  with pytest.raises(RuntimeError, match="bert-huge"):
    _workers.Worker("zoo", dict(spec, name="bert-huge"), warmup=0)


def test_depth_record_goes_to_its_own_block(tmp_path):
  depth = {"bench": "depth", "machine": MACHINE, "depths": [4, 8],
           "seq_len": 4096, "batch": 1,
           "results": {"reversible": {"4": {"temp_bytes": 2**20,
                                            "total_bytes": 2**21},
                                      "8": {"temp_bytes": 2**20,
                                            "total_bytes": 2**22}}},
           "slopes": {"reversible": {"temp": 0.0, "total": 1.0}}}
  log = tmp_path / "depth.log"
  log.write_text(f"{report.TAG} {json.dumps(depth)}\n")
  readme = tmp_path / "README.md"
  readme.write_text("<!-- perf:start -->\nkept\n<!-- perf:end -->\n"
                    "<!-- depth:start -->\nold\n<!-- depth:end -->\n")
  report.main([str(log), "--readme", str(readme), "--block", "depth"])
  text = readme.read_text()
  assert "kept" in text and "old" not in text
  assert "from the output of `bench/depth.py`" in text
  assert "| reversible | 8 | 1.0 | 4.0 |" in text
  assert "reversible: temporaries 0.00, total 1.00" in text


def test_prune_and_quant_records_render_their_tables():
  prune = {"bench": "prune", "machine": MACHINE, "batch": 2, "seq_len": 128,
           "steps": 3, "remove": 0.5,
           "results": {"small": {"heads": 8, "heads_kept": 4, "layers": 4,
                                 "embed": 512, "params_full": 29.06e6,
                                 "params_pruned": 26.96e6,
                                 "seconds_full": 0.2, "seconds_pruned": 0.15,
                                 "ratio": 0.75}}}
  gap = {"max_abs_diff": 0.0861, "argmax_agree": 0.943}
  quant = {"bench": "quant", "machine": MACHINE, "size": "small",
           "batch": 8, "length": 128, "dots": {"s32": 24, "f32": 8},
           "seconds": {"float32": 0.5, "int8": 0.125},
           "accuracy": {"fake_vs_float32": gap, "int8_vs_float32": gap,
                        "int8_vs_fake": gap, "max_abs_logit": 2.6}}
  text = report.section([prune, quant])
  assert "`bench/quant.py` and `bench/prune.py`" in text
  assert ("| bert-small | 8 | 29.06M | 200.0 | 4 | 26.96M | 150.0 | 0.75 |"
          in text)
  assert "50% of each layer's heads" in text
  assert "dots by result type: 8 f32, 24 s32" in text
  assert "| int8 | 125.0 | 0.0861 | 94.3% |" in text
  assert "float32 / int8 time: 4.00." in text
  with pytest.raises(ValueError, match="unknown benchmark record 'nope'"):
    report.section([dict(prune, bench="nope")])


def test_static_record_renders_means_and_ranges_per_implementation():
  runs = [dict(scheme="skipgram", impl=impl, seed=seed, seconds=10.0 + seed,
               word_classes=wc, probe=pr)
          for impl, seed, wc, pr in (("zoo", 0, 60.0, 70.0),
                                     ("zoo", 1, 62.0, 74.0),
                                     ("gensim", 0, 61.0, 72.0),
                                     ("gensim", 1, 61.0, 73.0))]
  body = report.section([{"bench": "static_vs_gensim", "machine": MACHINE,
                          "size": "small", "passes": 5, "pieces": 1.7e6,
                          "triples": 1000, "runs": runs}])
  assert "| skipgram | zoo | 61.0 [60.0, 62.0] | 72.0 [70.0, 74.0] |" in body
  assert "| skipgram | gensim | 61.0 [61.0, 61.0] | 72.5 [72.0, 73.0] |" in body
  assert "2 seeds each" in body and "1.70M training pieces" in body
  # zoo - gensim: 61.0 - 61.0 and 72.0 - 72.5; spreads 2.0 and 4.0.
  assert "| skipgram | +0.0 | 2.0 | -0.5 | 4.0 |" in body


def test_knowledge_probe_record_marks_deltas_whose_interval_excludes_zero():
  row = {"workdir": "ernie", "family": "ernie", "facts": 10,
         "candidates": 7,
         "p_at_1": {"trained": [4.5, 2.0, 7.5], "random": [0.5, 0.0, 1.5],
                    "delta": [4.0, 1.0, 7.0]},
         "mrr": {"trained": [7.3, 4.7, 10.2], "random": [3.9, 2.8, 5.2],
                 "delta": [3.4, -0.3, 6.8]}}
  dea = dict(row, head="dea", candidates=5)
  body = report.section([{"bench": "knowledge_probe", "machine": MACHINE,
                          "rows": [row, dea]}])
  assert ("| ernie | ernie | MLM: pieces | 4.5 [2.0, 7.5] | 0.5 [0.0, 1.5] | "
          "+4.0 [+1.0, +7.0]* | 7.3 [4.7, 10.2] | 3.9 [2.8, 5.2] | "
          "+3.4 [-0.3, +6.8] |") in body
  assert "| ernie | ernie | dEA: entities | 4.5 [2.0, 7.5] |" in body
  assert "10 held-out facts" in body
  assert "(pieces among 7; entities among 5)" in body
  seen = report.section([{"bench": "knowledge_probe", "machine": MACHINE,
                          "rows": [row], "split": "seen"}])
  assert "10 seen (TransE trained on) facts" in seen


def test_pals_record_counts_params_and_averages_scores():
  def run(row, seed, a, b, added, shared):
    return dict(row=row, seed=seed, scores={"trec": a, "sms_spam": b},
                added={"trec": added, "sms_spam": added + 200},
                shared=shared, seconds=1.0)
  runs = [run("full", 0, 50.0, 80.0, 1000, 0),
          run("full", 1, 60.0, 90.0, 1000, 0),
          run("pals", 0, 40.0, 70.0, 100, 5000)]
  body = report.section([{"bench": "pals", "machine": MACHINE,
                          "backbone": "w/mlm", "family": "bert",
                          "tasks": ["trec", "sms_spam"], "steps": 10,
                          "lr": 1e-3, "max_len": 32, "pal_dim": 16,
                          "adapter_dim": 8, "runs": runs}])
  assert ("| full | 1.1k | 0.00M | 55.0 [50.0, 60.0] | 85.0 [80.0, 90.0] | "
          "70.0 [65.0, 75.0] |") in body
  assert "| pals | 0.2k | 0.01M | 40.0 [40.0, 40.0] |" in body
  assert "mean over 2 seeds" in body and "10 steps of 16 rows x 32" in body


def _grover_record(random=True):
  ci = lambda a, b, c: [a, b, c]
  disc = {"train": 150, "test": 152, "chance": 50.0,
          "trained": {"accuracy": ci(91.4, 86.8, 95.4)}}
  if random:
    disc["random"] = {"accuracy": ci(70.0, 62.5, 77.0)}
    disc["delta"] = ci(21.4, 13.2, 29.6)
  opening = {"articles": 305, "pieces": 9760.0,
             "ppl_with": ci(300.0, 280.0, 320.0),
             "ppl_without": ci(330.0, 310.0, 350.0),
             "nll_diff": ci(0.095, 0.07, 0.12),
             "ppl_ratio": ci(1.1, 1.073, 1.127)}
  return {"bench": "grover", "machine": MACHINE, "top_k": 0, "top_p": 0.9,
          "disc_steps": 200, "gen_pieces": 97.4, "opening": 32,
          "perplexity_opening": opening,
          "seconds": {"total": 1500, "pretrain": 700},
          "run": {"layers": 4, "width": 128, "params": 1.85e6,
                  "steps": 1500, "batch": 8, "seq_len": 256},
          "perplexity": {"articles": 305, "pieces": 65000.0,
                         "ppl_with": ci(180.2, 170.1, 190.5),
                         "ppl_without": ci(190.4, 180.2, 201.0),
                         "nll_diff": ci(0.055, 0.041, 0.069),
                         "ppl_ratio": ci(1.057, 1.042, 1.071)},
          "discriminator": disc}


def test_grover_record_renders_perplexities_and_the_discriminator(tmp_path):
  body = report.section([_grover_record()])
  assert ("| body perplexity (window), after topic + headline | "
          "180.2 [170.1, 190.5] |") in body
  assert ("| alone - with (window), nats per piece | "
          "+0.055 [+0.041, +0.069] |") in body
  assert "| perplexity ratio alone / with (opening) | 1.100 [1.073, 1.127] |"\
      in body
  assert "each body's first 32" in body and "25 min (pre-training 12 min)"\
      in body
  assert "| pre-trained - random, points | +21.4 [+13.2, +29.6] |" in body
  assert "| chance, % | 50.0 |" in body and "top-p 0.9" in body
  assert "random-init" not in report.section([_grover_record(False)])
  # The bench's --out file (one JSON object) reads as its BENCH_JSON line.
  path = tmp_path / "results.json"
  path.write_text(json.dumps(_grover_record(), indent=1))
  assert report.read_records([path]) == [_grover_record()]


def test_speech_section_lists_every_row_and_view():
  iv = lambda x: [x, x - 1.0, x + 1.0]
  row = lambda x, d: {"accuracy": iv(x), "delta": d, "classes": 8}
  record = {"bench": "speech", "config": "configs.mockingjay_mam:steps=5",
            "steps": 5, "pretrain_seconds": 12.0, "final_loss": 0.7,
            "train_utterances": 40, "machine": {},
            "rows": {"pre-trained": {"phone": row(60.0, [2.0, 1.0, 3.0]),
                                     "voice": row(90.0, [-1.0, -2.0, 1.0])},
                     "random init": {"phone": row(58.0, None),
                                     "voice": row(91.0, None)},
                     "log-mel input": {"phone": row(64.0, [6.0, 5.0, 7.0])}}}
  text = report.section([record])
  assert "| pre-trained | 60.0 [59.0, 61.0] | +2.0 [+1.0, +3.0]* | " in text
  assert "90.0 [89.0, 91.0] | -1.0 [-2.0, +1.0] |" in text
  assert ("| log-mel input | 64.0 [63.0, 65.0] | +6.0 [+5.0, +7.0]* |  |  |"
          in text)


def test_few_shot_speed_record_renders_one_row_per_backbone():
  record = {"bench": "few_shot_speed", "machine": MACHINE, "runs": 9,
            "turns": 3, "results": {
                "random_t5": {"reference": 21.9, "zoo": 16.5,
                              "ratio": 21.9 / 16.5},
                "random_bert": {"reference": 10.5, "zoo": 8.9,
                                "ratio": 10.5 / 8.9}}}
  text = report.section([record])
  assert "`bench/few_shot_speed.py`" in text
  assert "(9 per row: tasks x seeds)" in text
  assert "| random_t5 | 21.9 | 16.5 | 1.33 |" in text
  assert "| random_bert | 10.5 | 8.9 | 1.18 |" in text


def test_head_loss_record_renders_every_chunk_against_the_whole_logits():
  record = {"bench": "head_loss", "machine": MACHINE, "model": "gpt2-small",
            "objective": "clm", "size": "tiny",
            "batch": 32, "seq_len": 128, "steps": 10, "core": 0,
            "results": {"4000": {"0": 143.6, "16": 133.9, "8": 130.6},
                        "512": {"0": 65.9, "8": 65.6, "16": 65.2}}}
  text = report.section([record])
  assert "`bench/head_loss.py`" in text
  assert "pinned to one core" in text
  rows = [line for line in text.splitlines() if line.startswith("| 4,000")]
  assert rows == ["| 4,000 | 0 | 143.6 | 1.00 |",
                  "| 4,000 | 8 | 130.6 | 1.10 |",
                  "| 4,000 | 16 | 133.9 | 1.07 |"]
  assert "| 512 | 16 | 65.2 | 1.01 |" in text


def test_head_loss_record_names_its_model_and_scheme():
  record = {"bench": "head_loss", "machine": MACHINE, "model": "t5-small",
            "objective": "t5_span", "size": "tiny", "batch": 32,
            "seq_len": 128, "steps": 8, "core": -1,
            "results": {"4000": {"0": 154.5, "8": 147.4}}}
  text = report.section([record])
  assert "step of T5 tiny under `t5_span`, batch 32 x 128 tokens, on every" \
      in text
  assert "| 4,000 | 8 | 147.4 | 1.05 |" in text
