"""Per-class strategy clusters (SpRAy: spectral relevance analysis, Lapuschkin et al., 2019), the
atypicality of each sample, and the 2-D embedding for display.

SpRAy, for the maps of one class (flattened (s, s) maps that sum to 1):

1. the symmetric k-nearest-neighbour graph (Euclidean distance), each edge weighted by the
   Gaussian kernel ``exp(-d^2 / (2 sigma^2))`` with ``sigma`` the median distance of the edges
   (:func:`knn_affinity`);
2. the eigenvalues of its normalised Laplacian ``L = I - D^-1/2 W D^-1/2``, smallest first
   (:func:`laplacian_spectrum`);
3. the eigengap choice of k (:func:`eigengap`): the k in 1 .. ``max_clusters`` after which the
   spectrum jumps the most, ``k = argmax_k (lambda_{k+1} - lambda_k)``. k = 1 means that no gap
   after the first eigenvalue beats the gap after the first one (the class has no clear
   structure: one strategy). The gap must also be clear: a k > 1 is kept only when its gap is at
   least ``min_gap`` (0.05); otherwise k = 1. A graph of c disconnected parts has c zero
   eigenvalues and gets k = c (within ``max_clusters``);
4. the labels: k-means (seeded) on the rows of the first k eigenvectors of
   ``D^-1/2 W D^-1/2``, each row normalised to unit length (Ng, Jordan and Weiss, 2001).

Each cluster's members are ordered most typical first (the distance of a sample's map to the
cluster's mean map). A sample's atypicality is the distance of its map to its class's mean map,
divided by the median of those distances in the class (1 = a typical distance; 0 when every
map of the class is the same).

Example:
    >>> W = np.kron(np.eye(3), np.ones((4, 4))) - np.eye(12)   # 3 separate blocks of 4
    >>> eigengap(laplacian_spectrum(scipy_sparse().csr_matrix(W), 6)[0], 6)
    3
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "ClassClusters",
    "atypicality",
    "cluster_class",
    "eigengap",
    "embed",
    "knn_affinity",
    "laplacian_spectrum",
    "stratified_sample",
]

#: the smallest eigengap that counts as a clear one for k > 1
MIN_GAP = 0.05
#: classes at most this large get a dense eigendecomposition (else Lanczos, scipy's eigsh)
_DENSE = 1000


#: below this many samples, k-means and t-SNE run on one thread: OpenMP's threads buy nothing on
#: small problems and, on a busy machine, wait on each other at every one of t-SNE's iterations
#: (a 300-sample t-SNE took 62 s on 2 threads of a loaded 2-core machine, 4.3 s on one)
SMALL = 2000


def _threads(n: int) -> Any:
    """A context that holds native thread pools to one thread for problems under :data:`SMALL`."""
    import contextlib

    from threadpoolctl import threadpool_limits

    return threadpool_limits(1) if n < SMALL else contextlib.nullcontext()


def scipy_sparse() -> Any:
    """``scipy.sparse`` (imported when used: ``import xaikit`` stays light)."""
    import scipy.sparse

    return scipy.sparse


def knn_affinity(x: np.ndarray, neighbors: int) -> Any:
    """The symmetric k-NN affinity (scipy CSR, (n, n)) of the rows of ``x``: an edge between two
    rows when either is among the other's ``neighbors`` nearest (Euclidean), weighted by a
    Gaussian kernel of the distance (sigma: the median edge distance; 1 where all are 0)."""
    from sklearn.neighbors import NearestNeighbors

    n = len(x)
    k = max(1, min(int(neighbors), n - 1))
    dist, idx = NearestNeighbors(n_neighbors=k + 1).fit(x).kneighbors(x)
    dist, idx = dist[:, 1:], idx[:, 1:]  # each row's own point first (or a duplicate of it)
    sigma = float(np.median(dist)) or 1.0
    w = np.exp(-(dist.astype(np.float64) ** 2) / (2.0 * sigma**2))
    sp = scipy_sparse()
    graph = sp.csr_matrix((w.ravel(), (np.repeat(np.arange(n), k), idx.ravel())), shape=(n, n))
    graph = graph.maximum(graph.T)
    graph.setdiag(0.0)
    graph.eliminate_zeros()
    return graph.tocsr()


def _normalized(graph: Any) -> Any:
    """``D^-1/2 W D^-1/2`` (an isolated node keeps a zero row)."""
    deg = np.asarray(graph.sum(axis=1)).ravel()
    inv = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    d = scipy_sparse().diags(inv)
    return (d @ graph @ d).tocsr()


def laplacian_spectrum(graph: Any, count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` smallest eigenvalues of the normalised Laplacian of ``graph`` (ascending) and
    the matching eigenvectors of ``D^-1/2 W D^-1/2`` as columns (n, count). Dense for small
    graphs, scipy's ``eigsh`` (largest eigenvalues of ``D^-1/2 W D^-1/2``, seeded start) else."""
    n = graph.shape[0]
    count = max(1, min(int(count), n))
    m = _normalized(graph)
    if n <= _DENSE or count >= n - 1:
        values, vectors = np.linalg.eigh(m.toarray())
        values, vectors = values[::-1][:count], vectors[:, ::-1][:, :count]
    else:
        from scipy.sparse.linalg import ArpackNoConvergence, eigsh

        v0 = np.random.default_rng(seed).random(n)
        try:
            values, vectors = eigsh(m, k=count, which="LA", v0=v0)
        except ArpackNoConvergence:  # clustered eigenvalues: a wider Krylov space, more steps
            values, vectors = eigsh(
                m, k=count, which="LA", v0=v0, ncv=min(n, max(4 * count, 64)), maxiter=50 * n
            )
        order = np.argsort(values)[::-1]
        values, vectors = values[order], vectors[:, order]
    return np.clip(1.0 - values, 0.0, 2.0), vectors


def eigengap(eigenvalues: np.ndarray, max_clusters: int, min_gap: float = MIN_GAP) -> int:
    """The eigengap choice of k in 1 .. ``max_clusters`` (see the module): the k after which the
    ascending Laplacian spectrum jumps the most; 1 when that is after the first eigenvalue or when
    the jump is less than ``min_gap``.

    Example:
        >>> eigengap(np.array([0.0, 0.01, 0.02, 0.6, 0.7]), 4), eigengap(np.array([0.0, 0.5, 0.55, 0.6]), 3)
        (3, 1)
    """
    values = np.sort(np.asarray(eigenvalues, dtype=np.float64))
    top = min(int(max_clusters), len(values) - 1)
    if top < 2:
        return 1
    gaps = np.diff(values[: top + 1])  # gaps[k - 1] = lambda_{k+1} - lambda_k, k = 1 .. top
    k = int(np.argmax(gaps)) + 1
    return k if k > 1 and gaps[k - 1] >= min_gap else 1


def _spectral_labels(vectors: np.ndarray, k: int, seed: int) -> np.ndarray:
    from sklearn.cluster import KMeans

    emb = vectors[:, :k]
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    emb = emb / np.where(norms > 0, norms, 1.0)
    with _threads(len(emb)):
        return KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(emb).astype(np.int64)


@dataclass
class ClassClusters:
    """SpRAy of one class: the Laplacian ``eigenvalues`` (ascending), the chosen ``k``, the
    ``labels`` (n,) in 0 .. k - 1, numbered by size (largest first), and each cluster's
    ``order`` (its members' positions, most typical first) and ``mean`` map."""

    eigenvalues: np.ndarray
    k: int
    labels: np.ndarray
    order: list[np.ndarray]
    means: list[np.ndarray]


def cluster_class(
    maps: np.ndarray, max_clusters: int, neighbors: int, seed: int = 0, min_gap: float = MIN_GAP
) -> ClassClusters:
    """SpRAy of one class's (n, s, s) maps (see the module)."""
    n = len(maps)
    flat = maps.reshape(n, -1).astype(np.float64)
    graph = knn_affinity(flat, neighbors)
    values, vectors = laplacian_spectrum(graph, min(max_clusters + 1, n), seed)
    k = eigengap(values, max_clusters, min_gap)
    labels = np.zeros(n, np.int64) if k == 1 else _spectral_labels(vectors, k, seed)
    sizes = np.bincount(labels, minlength=k)
    rank = np.argsort(-sizes, kind="stable")  # cluster 0: the largest
    labels = np.argsort(rank)[labels]
    k = len(np.unique(labels))
    order, means = [], []
    for c in range(k):
        members = np.flatnonzero(labels == c)
        mean = flat[members].mean(axis=0)
        dist = np.linalg.norm(flat[members] - mean, axis=1)
        order.append(members[np.argsort(dist, kind="stable")])
        means.append(mean.reshape(maps.shape[1:]).astype(np.float32))
    return ClassClusters(values, k, labels, order, means)


def atypicality(maps: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """(n,) float32: each map's distance to ``mean`` over the median of those distances (0 where
    the median is 0).

    Example:
        >>> m = np.array([[0.0], [1.0], [2.0], [4.0]])
        >>> atypicality(m, np.array([1.0])).tolist()
        [1.0, 0.0, 1.0, 3.0]
    """
    d = np.linalg.norm(maps.reshape(len(maps), -1) - mean.reshape(1, -1), axis=1)
    med = float(np.median(d)) if len(d) else 0.0
    return (d / med if med > 0 else np.zeros_like(d)).astype(np.float32)


def stratified_sample(klass: np.ndarray, limit: int, seed: int) -> np.ndarray:
    """Sorted positions of at most ``limit`` samples, each class getting a share proportional to
    its size (largest remainders; at least one per class while the limit allows), drawn without
    replacement by a seeded generator; every sample when there are at most ``limit``.

    Example:
        >>> stratified_sample(np.array([0] * 8 + [1] * 2), 5, 0).size
        5
    """
    n = len(klass)
    if n <= limit:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(klass, return_counts=True)
    share = counts * (limit / n)
    take = np.floor(share).astype(np.int64)
    if limit >= len(classes):
        take = np.maximum(take, 1)
    left = limit - int(take.sum())
    if left > 0:
        take[np.argsort(-(share - np.floor(share)), kind="stable")[:left]] += 1
    while take.sum() > limit:  # the at-least-one rule overshot: trim the largest shares
        take[int(np.argmax(take))] -= 1
    picked = [
        rng.choice(np.flatnonzero(klass == c), size=int(min(t, cnt)), replace=False)
        for c, t, cnt in zip(classes, take, counts)
    ]
    return np.sort(np.concatenate(picked))


def embed(maps: np.ndarray, seed: int) -> np.ndarray:
    """(n, 2) float32 t-SNE (scikit-learn, seeded, PCA initialisation) of (n, s, s) maps, after a
    PCA to 50 dimensions; perplexity min(30, (n - 1) / 3). Fewer than 5 maps: their first two
    principal components instead (zeros for one map)."""
    from sklearn.decomposition import PCA

    n = len(maps)
    flat = maps.reshape(n, -1).astype(np.float64)
    if n < 5:
        out = np.zeros((n, 2))
        if n > 1:
            comps = PCA(n_components=min(2, n - 1, flat.shape[1])).fit_transform(flat)
            out[:, : comps.shape[1]] = comps
        return out.astype(np.float32)
    from sklearn.manifold import TSNE

    dims = min(50, n - 1, flat.shape[1])
    reduced = PCA(n_components=dims, random_state=seed).fit_transform(flat) if flat.shape[1] > dims else flat
    tsne = TSNE(n_components=2, init="pca", random_state=seed, perplexity=min(30.0, (n - 1) / 3.0))
    with _threads(n):
        return np.asarray(tsne.fit_transform(reduced), dtype=np.float32)
