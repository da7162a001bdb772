"""How the kernel package is put together: one module writes LLVM IR, and every compiled kernel
loads from numba's disk cache in a new process (no JIT compilation on a CLI run)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

import webdedup_assets
from webdedup_assets.core import kernel
from webdedup_assets.core.fingerprint import fingerprint_texts, shingle_sets
from webdedup_assets.core.minhash import MinHashParams

PACKAGE = Path(webdedup_assets.__file__).parent
ROOT = PACKAGE.parent


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_only_the_simd_module_imports_llvmlite():
    importers = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(name == "llvmlite" or name.startswith("llvmlite.") for name in _imported_modules(path))
    }
    assert importers == {"core/kernel/simd.py"}


def _use_every_kernel() -> dict[str, list[int]]:
    """Call each kernel the product calls; returns each dispatcher's (cache hits, cache misses)."""
    coeff_a, coeff_b = MinHashParams(64, 1).coefficients()
    texts = pa.array(["cached kernels", "é ΣΟΦΙΑ 日本", "\u1100\u1161\u11a8 flagged: normalized exactly"])
    fingerprint_texts(texts, 3, coeff_a, coeff_b)
    flat, offsets = shingle_sets(texts, 3)
    out = np.zeros(1)
    sets = (flat, offsets[:-1], offsets[1:])
    kernel.jaccard_blocks(*sets, *sets, np.array([0]), np.array([1]), out)
    return {
        name: [
            sum(getattr(kernel, name).stats.cache_hits.values()),
            sum(getattr(kernel, name).stats.cache_misses.values()),
        ]
        for name in kernel.__all__
    }


def test_every_kernel_loads_from_the_disk_cache_in_a_new_process():
    _use_every_kernel()  # compiles (and writes the cache) if this checkout has not yet
    code = "import json, tests.test_kernel_layout as t; print(json.dumps(t._use_every_kernel()))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("NUMBA_DISABLE_JIT", None)
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    stats = json.loads(run.stdout.strip().splitlines()[-1])
    assert {name: misses for name, (_, misses) in stats.items() if misses} == {}
    called = ["fingerprint_batch", "shingle_sets_batch", "filter_codepoints", "collapse_separators", "jaccard_blocks"]
    assert all(stats[name][0] >= 1 for name in called), stats
