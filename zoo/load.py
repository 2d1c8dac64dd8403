"""`zoo.load(path)` for notebooks; the code lives in `zoo.loading`.

This module is itself callable, so `zoo.load(path)` works whether or not
`zoo.load` (the module) was imported first: importing a submodule sets the
package attribute to the module, which would otherwise hide the function.
"""

import sys
import types

from zoo.checkpoint import restore_params  # noqa: F401
from zoo.loading import Loaded, load


class _CallableModule(types.ModuleType):
  """A module that calls `zoo.loading.load` when called."""

  def __call__(self, path, step: int | None = None) -> Loaded:
    """`zoo.loading.load(path, step)`."""
    return load(path, step)


sys.modules[__name__].__class__ = _CallableModule
