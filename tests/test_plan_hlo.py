"""zoo.plan.hlo: collectives, their bytes and loop counts from HLO text."""

import pytest

from zoo.plan import hlo

# A hand-written optimized module: an all-reduce in the entry, an
# all-gather inside a while body that runs 12 times, a reduce-scatter with
# an iota replica group, and a cross-slice transfer.
MODULE = """HloModule jit_step, is_scheduled=true

%body.1 (p: (s32[], f32[4,8])) -> (s32[], f32[4,8]) {
  %p = (s32[], f32[4,8]{1,0}) parameter(0)
  %x = f32[4,8]{1,0} get-tuple-element(%p), index=1
  %all-gather.3 = f32[16,8]{1,0} all-gather(%x), channel_id=3, replica_groups=mesh['axis_0'=2,'axis_1'=4], device_ids=([2,4]T(1,0)) {'axis_1'}, dimensions={0}
  ROOT %t = (s32[], f32[4,8]{1,0}) tuple(%i, %x)
}

%cond.1 (p: (s32[], f32[4,8])) -> pred[] {
  ROOT %c = pred[] constant(true)
}

ENTRY %main.1 (a: f32[1024], b: bf16[8,64]) -> f32[1024] {
  %a = f32[1024]{0} parameter(0)
  %all-reduce.1 = f32[1024]{0} all-reduce(%a), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=%add
  %reduce-scatter.2 = bf16[2,64]{1,0} reduce-scatter(bf16[8,64]{1,0} %b), channel_id=2, replica_groups=[2,4]<=[8], dimensions={0}
  %w = (s32[], f32[4,8]{1,0}) while(%init), condition=%cond.1, body=%body.1, backend_config={"known_trip_count":{"n":"12"}}
  %send = (f32[1024]{0}, u32[], token[]) send(%all-reduce.1, %after-all), channel_id=9, is_host_transfer=true, frontend_attributes={_xla_megascale_transfer_type="ALL_REDUCE"}
  ROOT %r = f32[1024]{0} copy(%all-reduce.1), metadata={op_name="jit(step)/copy"}
}
"""


def test_shape_bytes_reads_each_array_of_a_type():
  assert hlo.shape_bytes("(f32[2,3]{1,0}, bf16[4]{0}, s32[])") == [24, 8, 4]


def test_replica_group_forms():
  explicit = "x replica_groups={{0,1},{2,3}}, to_apply=%a"
  assert hlo.replica_groups(explicit) == [[0, 1], [2, 3]]
  iota = "replica_groups=[2,4]<=[4,2]T(1,0), dimensions={0}"
  assert hlo.replica_groups(iota) == [[0, 2, 4, 6], [1, 3, 5, 7]]
  mesh = ("replica_groups=mesh['axis_0'=2,'axis_1'=1,'axis_2'=2], "
          "device_ids=([2,2]T(1,0)) {'axis_0'}, dimensions={0}")
  # ids laid out as [[0, 2], [1, 3]] over (axis_0, axis_2); groups run
  # along axis_0.
  assert hlo.replica_groups(mesh) == [[0, 1], [2, 3]]


def test_loop_bodies_count_once_per_trip():
  comps, entry = hlo.computations(MODULE)
  assert entry == "main.1"
  runs = hlo.multipliers(comps, entry)
  assert runs["body.1"] == 12 and runs["main.1"] == 1


def test_collective_bytes_follow_the_ring_formulas():
  got = hlo.collectives(MODULE, num_slices=2)
  # all-reduce of 4 KiB over groups of 4: 2 * 3/4 * 4096 on the ICI; the
  # cross-slice send of the same 4 KiB over 2 slices: 2 * 1/2 * 4096.
  assert got["all-reduce"]["count"] == 2
  assert got["all-reduce"]["bytes"] == pytest.approx(6144 + 4096)
  assert got["all-reduce"]["dcn_bytes"] == pytest.approx(4096)
  # all-gather to 16 x 8 f32 (512 B) over groups of 4, 12 trips.
  assert got["all-gather"] == {"count": 12, "dcn_bytes": 0.0,
                               "bytes": pytest.approx(12 * 0.75 * 512)}
  # reduce-scatter of an 8 x 64 bf16 input (1 KiB) over groups of 4.
  assert got["reduce-scatter"]["bytes"] == pytest.approx(0.75 * 1024)


def test_largest_values_name_their_jax_operation():
  top = hlo.largest_values(MODULE, top=1)
  assert top[0]["bytes"] == 4096 and top[0]["type"] == "f32[1024]"


def test_trip_count_is_read_from_the_loop_condition():
  module = MODULE.replace(', backend_config={"known_trip_count":{"n":"12"}}',
                          "").replace(
      "  ROOT %c = pred[] constant(true)\n",
      "  %k = s32[]{:T(128)} constant(7)\n"
      "  %i = s32[]{:T(128)} get-tuple-element(%p), index=0\n"
      "  ROOT %c = pred[]{:T(512)} compare(%i, %k), direction=LT\n")
  comps, entry = hlo.computations(module)
  assert hlo.multipliers(comps, entry)["body.1"] == 7
