"""The zoo: the BERT family of pre-training schemes as pure JAX functions.

`zoo.load(path)` opens a trained workdir or a Hugging Face folder (see
`zoo.loading`); it is imported on first use, so `import zoo` stays light.
Importing the package keeps freed host memory mapped for reuse
(`zoo.host_memory`, before JAX starts its threads).
"""

from zoo import host_memory as _host_memory

_host_memory.keep()


def __getattr__(name):
  if name == "load":
    import importlib  # pylint: disable=import-outside-toplevel
    return importlib.import_module("zoo.load")
  raise AttributeError(f"module 'zoo' has no attribute {name!r}")
