"""C4-schema json.gz shards as a TFDS array_record dataset, without TensorFlow.

The builder reads the shards `c4.write_shards` wrote; keys are
`<shard>-<line>`, unique, as TFDS's shuffle-by-key-hash requires. Read back
with `tfds.builder_from_directory(folder).as_data_source()`.
"""

import gzip
import json
import pathlib

import tensorflow_datasets as tfds
from etils import epath


class ZooC4Sample(tfds.core.GeneratorBasedBuilder):
  """The embedded sample in the C4 record schema (text, url, timestamp)."""

  VERSION = tfds.core.Version("1.0.0")

  # TFDS's default looks the module up as a package resource, which needs
  # the `importlib_resources` backport; this file is the answer it wants.
  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls) -> epath.Path:
    """This file."""
    return epath.Path(__file__)

  def __init__(self, *, c4_dir, **kwargs):
    self._c4_dir = pathlib.Path(c4_dir)
    super().__init__(**kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    text = tfds.features.Text()
    return tfds.core.DatasetInfo(
        builder=self, description="English prose laid out as C4 records.",
        features=tfds.features.FeaturesDict(
            {"text": text, "url": text, "timestamp": text}))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {split: self._generate_examples(split)
            for split in ("train", "validation")}

  def _generate_examples(self, split: str):
    for path in sorted(self._c4_dir.glob(f"c4-{split}.*.json.gz")):
      with gzip.open(path, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
          yield f"{path.name}-{i}", json.loads(line)


def prepare(c4_dir, out_dir) -> pathlib.Path:
  """Writes the array_record dataset; returns its version folder."""
  tfds.disable_progress_bar()
  builder = ZooC4Sample(c4_dir=c4_dir, data_dir=str(out_dir),
                        file_format="array_record")
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
      compute_stats=tfds.download.ComputeStatsMode.SKIP))
  return pathlib.Path(builder.data_dir)
