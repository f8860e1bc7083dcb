import numpy as np
import pytest
import scipy.sparse as sp

from kcheck.checkers import kmeans as km


@pytest.mark.parametrize("sparse", [False, True])
def test_hand_computed_case(sparse):
    # Two obvious groups; from any two distinct starting rows in different groups, Lloyd
    # converges to the group means (0.5, 0) and (10, 10.5).
    D = np.array([[0.0, 0.0], [1.0, 0.0], [10.0, 10.0], [10.0, 11.0]])
    X = sp.csr_matrix(D) if sparse else D
    # Seed 0 starts from rows 2 and 3 (both in the far group); Lloyd still separates them:
    # after one step the centers are (11/3, 10/3) and (10, 11), after two the group means.
    res = km.kmeans(X, 2, seed=0)
    centers = res.centers[np.argsort(res.centers[:, 0])]
    np.testing.assert_allclose(centers, [[0.5, 0.0], [10.0, 10.5]])
    assert res.labels[0] == res.labels[1] != res.labels[2] == res.labels[3]


@pytest.mark.parametrize("sparse", [False, True])
def test_distances_match_direct(rng, sparse):
    D = rng.normal(size=(15, 4))
    D[rng.random(D.shape) < 0.4] = 0
    C = rng.normal(size=(3, 4))
    X = sp.csr_matrix(D) if sparse else D
    direct = ((D[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
    np.testing.assert_allclose(km.sq_distances(X, C), direct, atol=1e-12)


def test_dense_and_sparse_agree(rng):
    D = rng.normal(size=(200, 5))
    D[rng.random(D.shape) < 0.5] = 0
    a = km.kmeans(D, 6, seed=1)
    b = km.kmeans(sp.csr_matrix(D), 6, seed=1)
    assert np.array_equal(a.labels, b.labels)
    np.testing.assert_allclose(a.centers, b.centers, atol=1e-12)


def test_empty_cluster_is_reseeded():
    # Duplicate rows make two starting centers identical, so one cluster starts empty.
    D = np.array([[0.0, 0.0]] * 5 + [[5.0, 5.0]] * 5 + [[9.0, 0.0]])
    res = km.kmeans(D, 3, seed=0, n_iter=5)
    assert np.unique(res.labels).size == 3


def test_n_clusters_rule():
    # The paper's K = max(4, floor(5 ln l)) from about 1,900 rows up ...
    assert km.n_clusters(24420) == int(np.floor(5 * np.log(24420)))
    assert km.n_clusters(1900) == int(np.floor(5 * np.log(1900))) == 37
    # ... and below, at most one cluster per MIN_CLUSTER_ROWS rows (at least 2).
    assert km.MIN_CLUSTER_ROWS == 50
    assert km.n_clusters(750) == 15  # the paper's rule gave 33 clusters of about 22 rows
    assert km.n_clusters(1500) == 30
    assert km.n_clusters(202) == 4
    assert km.n_clusters(100) == 2
    assert km.n_clusters(2) == 2
    assert km.n_clusters(1) == 1
    assert km.n_clusters(0) == 0
    for n in range(2, 5000, 37):
        assert 1 <= km.n_clusters(n) <= n
        assert km.n_clusters(n) <= max(2, n // km.MIN_CLUSTER_ROWS)


def test_seeded():
    D = np.random.default_rng(0).normal(size=(100, 3))
    a, b = km.kmeans(D, 5, seed=4), km.kmeans(D, 5, seed=4)
    assert np.array_equal(a.labels, b.labels)


def test_all_zero_data_keeps_its_centers_at_zero():
    X = sp.csr_matrix((30, 4))
    res = km.kmeans(X, 3, seed=0)
    assert res.centers.dtype == np.float64 and not res.centers.any()
