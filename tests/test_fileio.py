"""fileio's checksums: several input files hashed at once, each as hashlib hashes it alone."""

from __future__ import annotations

import hashlib

import pytest

from webdedup_assets.fileio import file_sha256s


@pytest.mark.parametrize("threads", ["1", "4"])
def test_file_sha256s_gives_each_files_own_sha256_in_the_given_order(tmp_path, monkeypatch, threads):
    monkeypatch.setenv("WEBDEDUP_THREADS", threads)
    paths = []
    for i, size in enumerate([0, 1, 3 << 20, 5000]):
        path = tmp_path / f"part-{i}.bin"
        path.write_bytes(bytes((i * 7 + j) % 251 for j in range(size)))
        paths.append(path)
    paths.reverse()
    expected = [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]
    assert file_sha256s(paths) == expected
    assert file_sha256s([]) == []
