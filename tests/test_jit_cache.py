"""The kernels' cache stamp covers every kernel source (core.jit_cache): editing a module that a
kernel inlines (tokenize.py for minhash.fingerprint_batch) invalidates the cached kernel."""

from __future__ import annotations

from webdedup_assets.core import jit_cache
from webdedup_assets.core.kernel import minhash, tokenize


def test_every_kernel_uses_the_all_sources_stamp():
    for dispatcher in (minhash.fingerprint_batch, minhash.shingle_sets_batch, tokenize.token_hashes):
        locator = dispatcher._cache._impl._locator
        assert isinstance(locator, (jit_cache.InTreeKernelLocator, jit_cache.UserDirKernelLocator))
        assert locator.get_source_stamp() == jit_cache.sources_stamp() == dispatcher._cache._cache_file._source_stamp
    names = {p.name for p in jit_cache.SOURCES}
    assert {"tokenize.py", "minhash.py", "simd.py", "mix.py", "sets.py", "normalize.py"} <= names


def test_the_stamp_changes_when_any_source_changes(tmp_path, monkeypatch):
    files = [tmp_path / "minhash.py", tmp_path / "tokenize.py"]
    for f in files:
        f.write_text("x = 1\n")
    monkeypatch.setattr(jit_cache, "SOURCES", tuple(files))
    before = jit_cache.sources_stamp()
    assert jit_cache.sources_stamp() == before
    files[1].write_text("x = 2\n")  # only the inlined module changes
    assert jit_cache.sources_stamp() != before


def test_functions_outside_core_keep_numba_locators(tmp_path):
    assert (
        jit_cache.InTreeKernelLocator.from_function(test_functions_outside_core_keep_numba_locators, __file__) is None
    )
