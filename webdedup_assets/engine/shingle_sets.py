"""Shingle sets of stored documents, recomputed with the kernel scoring uses and addressable by
doc_id: what the evaluation, tune, the far-member pass of clustering and the invariants compare."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.fingerprint import shingle_sets
from ..core.kernel import jaccard_blocks
from ..errors import WebdedupError
from ..storage.store import Store, connect
from ..threads import ordered_map, thread_count


@dataclass
class ShingleSets:
    """Sorted unique shingle hashes of documents, addressable by doc_id (each id once;
    load_shingle_sets gives them in doc_id order, shingle_sets_of and covering in any)."""

    doc_ids: pa.Array
    flat: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    def nodes(self, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        found = pc.index_in(ids, value_set=self.doc_ids)
        if found.null_count:
            raise WebdedupError("internal: a document without a computed shingle set")
        return found.to_numpy(zero_copy_only=False).astype(np.int64)

    def covering(self, store: Store, shingle_size: int, doc_ids: pa.Array, unit: str = "word") -> ShingleSets:
        """These sets with those of `doc_ids` they lack loaded from the store (none: no scan)."""
        wanted = pc.unique(doc_ids.cast(pa.string()))
        missing = wanted.filter(pc.invert(pc.is_in(wanted, value_set=self.doc_ids)))
        if not len(missing):
            return self
        more = load_shingle_sets(store, shingle_size, missing, unit)
        shift = len(self.flat)
        return ShingleSets(
            pa.concat_arrays([self.doc_ids, more.doc_ids]),
            np.concatenate([self.flat, more.flat]),
            np.concatenate([self.starts, more.starts + shift]),
            np.concatenate([self.ends, more.ends + shift]),
        )

    def jaccard(self, left: np.ndarray, right: np.ndarray, other: ShingleSets | None = None) -> np.ndarray:
        """Exact Jaccard of the pairs (left[i], right[i]) of nodes; `right` nodes of `other` if given."""
        other = self if other is None else other
        out = np.zeros(len(left), dtype=np.float64)
        if len(left):
            jaccard_blocks(self.flat, self.starts, self.ends, other.flat, other.starts, other.ends, left, right, out)
        return out


def shingle_sets_of(doc_ids: pa.Array, bodies: pa.Array, shingle_size: int, unit: str = "word") -> ShingleSets:
    """The sets of documents whose bodies are at hand (the kernel scoring uses), a slice of the
    documents per core (the kernel releases the GIL)."""
    threads = thread_count()
    step = max(SETS_SLICE_ROWS, -(-len(bodies) // threads))

    def one(start: int) -> ShingleSets:
        flat, offsets = shingle_sets(bodies[start : start + step], shingle_size, unit)
        offsets = np.asarray(offsets, np.int64)
        return ShingleSets(doc_ids[start : start + step].cast(pa.string()), flat, offsets[:-1], offsets[1:])

    if len(bodies) <= step:
        return one(0)
    return concat_sets(list(ordered_map(one, range(0, len(bodies), step), threads)))


SETS_SLICE_ROWS = 4_096  # fewer documents are not worth a thread


def concat_sets(parts: list[ShingleSets]) -> ShingleSets:
    """One ShingleSets of several (each doc_id in one of them only)."""
    if not parts:
        return ShingleSets(
            pa.array([], pa.string()), np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        )
    shifts = np.cumsum([0] + [len(p.flat) for p in parts[:-1]])
    return ShingleSets(
        pa.concat_arrays([p.doc_ids.cast(pa.string()) for p in parts]),
        np.concatenate([p.flat for p in parts]),
        np.concatenate([p.starts + shift for p, shift in zip(parts, shifts)]),
        np.concatenate([p.ends + shift for p, shift in zip(parts, shifts)]),
    )


def load_shingle_sets(
    store: Store, shingle_size: int, doc_ids: pa.Array | None = None, unit: str = "word"
) -> ShingleSets:
    """Shingle sets (the kernel scoring uses) of the given documents, or of all, in doc_id order;
    unit: the stored shingle_unit (core.fingerprint.shingling)."""
    con = connect(store)
    ids, flats, sizes = [], [], []
    try:
        if doc_ids is not None:
            con.register("wanted", pa.table({"doc_id": doc_ids.cast(pa.string())}))
            query = f"""SELECT d.doc_id, d.body FROM {store.scan_sql("documents")} d
                         WHERE d.doc_id IN (SELECT doc_id FROM wanted) ORDER BY d.doc_id"""
        else:
            query = f"SELECT doc_id, body FROM {store.scan_sql('documents')} ORDER BY doc_id"
        batches = con.sql(query).arrow(batch_size=16_384)

        def shingled(batch: pa.RecordBatch) -> tuple[pa.Array, np.ndarray, np.ndarray]:
            flat, offsets = shingle_sets(batch.column("body"), shingle_size, unit)
            return batch.column("doc_id").cast(pa.string()), flat, np.diff(offsets)

        # the kernel releases the GIL: batches are hashed on every core, kept in order
        for batch_ids, flat, batch_sizes in ordered_map(shingled, batches, thread_count()):
            ids.append(batch_ids)
            flats.append(flat)
            sizes.append(batch_sizes)
    finally:
        con.close()
    flat = np.concatenate(flats) if flats else np.zeros(0, np.uint64)
    sizes_all = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
    ends = np.cumsum(sizes_all).astype(np.int64)
    all_ids = pa.concat_arrays(ids) if ids else pa.array([], pa.string())
    if len(all_ids) != len(pc.unique(all_ids)):
        raise WebdedupError("documents hold a doc_id more than once; re-run the pipeline")
    return ShingleSets(all_ids, flat, ends - sizes_all, ends)
