"""Test setup: an 8-device CPU mesh before jax starts."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # pylint: disable=wrong-import-position

jax.config.update("jax_num_cpu_devices", 8)
