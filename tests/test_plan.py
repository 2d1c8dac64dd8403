"""zoo.plan: the trainer's step compiled ahead of time for TPU topologies.

These compile for TPU devices that libtpu describes, on this CPU host.
"""

import math
import subprocess
import sys

import jax
import pytest

from configs import bert_mlm
from zoo import plan as plan_lib
from zoo.plan import chips
from zoo import compile_cache
from tests.child_env import REPO, child_env


def tiny(**mesh):
  """BERT tiny MLM, 8 rows of 64, on a `data` x `fsdp` mesh."""
  c = bert_mlm.get_config("tiny")
  c.batch_size, c.seq_len = 8, 64
  c.mesh = dict({"data": -1, "fsdp": 1, "tensor": 1}, **mesh)
  return c


@pytest.fixture(scope="module")
def fsdp_plan():
  return plan_lib.make_plan(tiny(fsdp=4), "v5e:2x2")


def test_param_bytes_per_chip_are_the_sharded_shares(fsdp_plan):
  c = tiny(fsdp=4)
  _, devices = chips.devices("v5e:2x2")
  _, setup, mesh, _, _ = plan_lib.lower_step(c, devices)
  assert dict(mesh.shape) == {"data": 1, "fsdp": 4, "tensor": 1}
  expected = 0
  flat = jax.tree_util.tree_leaves(setup.abstract["params"])
  specs = jax.tree_util.tree_leaves(setup.shardings["params"])
  sharded = 0
  for leaf, shard in zip(flat, specs):
    axes = [a for part in shard.spec if part for a in
            (part if isinstance(part, tuple) else (part,))]
    shards = math.prod(mesh.shape[a] for a in axes)
    sharded += shards > 1
    expected += leaf.size * leaf.dtype.itemsize // shards
  assert sharded > 0  # the embed axis is on fsdp
  assert fsdp_plan.param_bytes == expected
  total = sum(l.size * l.dtype.itemsize for l in flat)
  assert fsdp_plan.param_bytes < total / 2
  # AdamW keeps two moments per param, sharded alike.
  assert fsdp_plan.opt_bytes >= 2 * fsdp_plan.param_bytes
  # The compiled step's arguments hold at least that state.
  assert fsdp_plan.argument_bytes >= fsdp_plan.param_bytes + \
      fsdp_plan.opt_bytes


def test_plan_reports_compute_and_collectives(fsdp_plan):
  assert fsdp_plan.chips == 4 and fsdp_plan.dtype == "bfloat16"
  assert fsdp_plan.flops > 0 and fsdp_plan.temp_bytes > 0
  # fsdp gathers weights and scatters gradients.
  assert fsdp_plan.collectives["all-gather"]["bytes"] > 0
  roof = fsdp_plan.roofline()
  assert roof["step_s"] == max(roof[k] for k in
                               ("compute_s", "hbm_s", "ici_s", "dcn_s"))
  assert 0 < roof["mfu"] <= 1
  assert fsdp_plan.fits
  text = fsdp_plan.report()
  assert "v5e:2x2" in text and "fits" in text


def test_fsdp_halves_the_state_of_plain_data_parallelism(fsdp_plan):
  plain = plan_lib.make_plan(tiny(), "v5e:2x2")
  assert plain.mesh["data"] == 4
  assert fsdp_plan.param_bytes < plain.param_bytes / 2
  assert "all-reduce" in plain.collectives


def test_precision_override_compiles_float32():
  c = tiny()
  c.model_args = {"dtype": "float32"}
  assert plan_lib.make_plan(c, "v5e:2x2").dtype == "float32"


def test_multi_slice_puts_data_across_slices_on_the_dcn():
  p = plan_lib.make_plan(tiny(fsdp=2), "v5e:2x2", num_slices=2)
  assert p.chips == 8 and p.hosts == 2 and p.mesh["data"] == 4
  assert p.collectives["all-reduce"]["dcn_bytes"] > 0
  assert p.roofline()["dcn_s"] > 0


def test_a_data_axis_that_cannot_span_the_slices_is_refused():
  with pytest.raises(ValueError, match="multiple of 2"):
    plan_lib.make_plan(tiny(data=1, fsdp=-1), "v5e:2x2", num_slices=2)


def test_a_plan_that_does_not_fit_names_its_largest_buffers():
  c = tiny()
  c.batch_size, c.seq_len = 8192, 512
  # Dense attention: the splash kernel would never form the logits.
  c.model_args = {"max_len": 512, "attention_dropout_rate": 0.0,
                  "attention_impl": "einsum"}
  with pytest.raises(plan_lib.PlanDoesNotFit) as e:
    plan_lib.make_plan(c, "v5e:2x2")
  message = str(e.value)
  assert "does not fit a v5e chip's 16.00 GiB" in message
  assert "temporaries" in message  # the compiler's own account
  # The largest state leaf (the token table's Adam moments or itself) and
  # the attention logits of all 8192 rows are named.
  assert "token" in message and "f32[8192,4,512,512]" in message


def test_a_plan_over_its_chips_hbm_is_refused_by_check(fsdp_plan):
  import dataclasses  # pylint: disable=import-outside-toplevel
  small = dataclasses.replace(fsdp_plan.chip, hbm_bytes=1024)
  over = dataclasses.replace(fsdp_plan, chip=small)
  with pytest.raises(plan_lib.PlanDoesNotFit, match="per chip"):
    over.check()
  fsdp_plan.check()


@pytest.mark.parametrize("name, match", [
    ("v5e-16", "not CHIP:AxB"), ("v9:4x4", "unknown chip"),
    ("h100:2x2", "roofline only")])
def test_bad_topologies_are_refused(name, match):
  with pytest.raises(ValueError, match=match):
    chips.parse_topology(name)


def test_cli_prints_the_plan_and_exits_by_fit():
  def run(*args, config="configs/bert_mlm.py:tiny"):
    return subprocess.run(
        [sys.executable, "-m", "zoo.plan", "--config", config,
         "--topology", "v5e:2x2",
         "--config.batch_size=8", *args], capture_output=True, text=True,
        env=child_env(compile_cache.folder(), 1), cwd=REPO, check=False,
        timeout=600)
  ok = run("--config.mesh.fsdp=2")
  assert ok.returncode == 0, ok.stderr[-2000:]
  assert "fits" in ok.stdout and "all-gather" in ok.stdout
  bad_mesh = run("--config.mesh.data=3")
  assert bad_mesh.returncode == 2 and "mesh" in bad_mesh.stderr
  too_big = run("--config.batch_size=8192", "--config.seq_len=512", config=(
      "configs/bert_mlm.py:tiny,model_args.max_len=512,"
      "model_args.attention_impl=einsum,model_args.attention_dropout_rate=0"))
  assert too_big.returncode == 1 and "does not fit" in too_big.stderr


def test_remat_policies_are_each_planned():
  c = tiny(fsdp=2)
  c.model_args = {"num_layers": 2}
  rows = plan_lib.remat_table(c, "v5e:2x2")
  assert [r["remat"] for r in rows] == ["none", "dots", "full"]
  assert all(r["fits"] and r["compile_s"] > 0 and r["temp_bytes"] > 0
             for r in rows)
  c.model, c.objective, c.model_args = "reformer", "clm", {}
  with pytest.raises(ValueError, match="reformer has no remat policies"):
    plan_lib.remat_table(c, "v5e:2x2")


def test_a_mesh_axis_may_split_a_physical_axis():
  # 8 is no product of the 4x4x4 torus's axes: one of them is split.
  from zoo import sharding  # pylint: disable=import-outside-toplevel
  _, devices = chips.devices("v5p:4x4x4")
  mesh = sharding.make_mesh({"data": -1, "fsdp": 8, "tensor": 1}, devices)
  assert dict(mesh.shape) == {"data": 8, "fsdp": 8, "tensor": 1}
  assert sorted(d.id for d in mesh.devices.flat) == sorted(
      d.id for d in devices)
