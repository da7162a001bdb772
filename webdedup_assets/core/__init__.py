"""Pure algorithms: no Dagster, no files."""

from .jit_cache import register as _register_kernel_cache

_register_kernel_cache()  # before any kernel is defined: see jit_cache
