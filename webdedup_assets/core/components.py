"""Connected components with union-find (near-linear, even on one long chain)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def _find(parent, node):
    while parent[node] != node:
        parent[node] = parent[parent[node]]  # path halving
        node = parent[node]
    return node


@njit(nogil=True, cache=True)
def _components(n_nodes, left, right):
    parent = np.arange(n_nodes, dtype=np.int64)
    for i in range(left.shape[0]):
        root_a = _find(parent, left[i])
        root_b = _find(parent, right[i])
        if root_a < root_b:
            parent[root_b] = root_a
        elif root_b < root_a:
            parent[root_a] = root_b
    for node in range(n_nodes):
        parent[node] = _find(parent, node)
    return parent


def component_labels(n_nodes: int, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Label of every node = the smallest node index in its component.

    Nodes are numbered in doc_id order, so the label names the component's smallest doc_id:
    a cluster id that stays put when unrelated documents arrive.
    """
    left = np.ascontiguousarray(left, dtype=np.int64)
    right = np.ascontiguousarray(right, dtype=np.int64)
    if left.shape != right.shape:
        raise ValueError("left and right must have the same length")
    if left.size and (min(left.min(), right.min()) < 0 or max(left.max(), right.max()) >= n_nodes):
        raise ValueError(f"edge endpoints must lie in [0, {n_nodes})")
    return _components(n_nodes, left, right)
