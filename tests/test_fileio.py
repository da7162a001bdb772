"""fileio's checksums: several input files hashed at once, each as hashlib hashes it alone."""

from __future__ import annotations

import hashlib

import pytest

from webdedup_assets.storage.fileio import file_sha256s


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


def test_an_input_hashed_in_the_background_resolves_to_the_same_files_and_checksums(tmp_path):
    from webdedup_assets.errors import WebdedupError
    from webdedup_assets.ingest import inputs

    folder = tmp_path / "exports"
    folder.mkdir()
    for day in ("2026-03-01", "2026-03-02"):
        (folder / f"{day}.csv").write_text(f"doc_id,body\n{day},some text\n", encoding="utf-8")
    inputs.hash_in_background(str(folder))
    files = inputs.resolve_input(str(folder))
    assert [f.path.name for f in files] == ["2026-03-01.csv", "2026-03-02.csv"]
    assert [f.sha256 for f in files] == [hashlib.sha256(f.path.read_bytes()).hexdigest() for f in files]
    assert (str(folder), "auto") not in inputs._hashing  # waited for, then forgotten
    # an input that cannot be read: the background thread keeps quiet, resolve_input says why
    inputs.hash_in_background(str(tmp_path / "missing"))
    with pytest.raises(WebdedupError, match="does not exist"):
        inputs.resolve_input(str(tmp_path / "missing"))
