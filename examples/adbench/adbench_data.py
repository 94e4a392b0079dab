"""Readers for ADBench's input files (the formats of ADBench's docs/FileFormat.md).

The files live in ``examples/adbench/data`` (copied unchanged from microsoft/ADBench, MIT
licence: see its README.md there); ``data_path`` finds them from this file's location, whatever
the working directory.

>>> alphas, means, icf, x, gamma, m = read_gmm(data_path("gmm", "test.txt"))
>>> alphas.shape, means.shape, icf.shape, x.shape, gamma, m
((3,), (3, 2), (3, 3), (1, 2), 1.0, 0)
"""

from pathlib import Path

import numpy as np

DATA_DIR = Path(__file__).resolve().parent / "data"


def data_path(*parts):
    """The path of an ADBench data file, e.g. ``data_path("gmm", "test.txt")``.

    >>> data_path("ba", "test.txt").name
    'test.txt'
    """
    return DATA_DIR.joinpath(*parts).resolve()


def _floats(line):
    return [float(v) for v in line.split()]


def read_gmm(path, replicate_point=False):
    """(alphas, means, icf, x, wishart_gamma, wishart_m) from a GMM file.

    >>> read_gmm(data_path("gmm", "test.txt"))[0]
    array([-0.649014,  1.181166, -0.758453])
    """
    with open(path) as f:
        lines = [ln for ln in f.read().splitlines() if ln.strip()]
    d, k, n = (int(v) for v in lines[0].split())
    row = 1
    alphas = np.array([float(lines[row + j]) for j in range(k)])
    row += k
    means = np.array([_floats(lines[row + j]) for j in range(k)])
    row += k
    icf = np.array([_floats(lines[row + j]) for j in range(k)])
    row += k
    if replicate_point:
        x = np.array([_floats(lines[row])] * n)
        row += 1
    else:
        x = np.array([_floats(lines[row + j]) for j in range(n)])
        row += n
    gamma, m = lines[row].split()
    assert means.shape == (k, d) and icf.shape == (k, d * (d + 1) // 2)
    return alphas, means, icf, x, float(gamma), int(m)


def read_ba(path):
    """(cams, points, weights, obs, feats) from a BA file.

    The file holds one camera, one point, one weight and one feature, replicated ``n``, ``m``
    and ``p`` times; observation ``i`` pairs camera ``i % n`` with point ``i % m``.

    >>> cams, points, w, obs, feats = read_ba(data_path("ba", "test.txt"))
    >>> cams.shape, points.shape, w.shape, obs[:3].tolist(), feats.shape
    ((2, 11), (10, 3), (10,), [[0, 0], [1, 1], [0, 2]], (10, 2))
    """
    with open(path) as f:
        lines = [ln for ln in f.read().splitlines() if ln.strip()]
    n, m, p = (int(v) for v in lines[0].split())
    cams = np.tile(_floats(lines[1]), (n, 1))
    points = np.tile(_floats(lines[2]), (m, 1))
    weights = np.full(p, float(lines[3]))
    feats = np.tile(_floats(lines[4]), (p, 1))
    obs = np.array([[i % n, i % m] for i in range(p)], dtype=np.int64)
    return cams, points, weights, obs, feats


def read_lstm(path):
    """(main_params, extra_params, state, sequence) from an LSTM file.

    >>> main_params, extra_params, state, sequence = read_lstm(
    ...     data_path("lstm", "lstm_l2_c1024.txt"))
    >>> main_params.shape, extra_params.shape, state.shape, sequence.shape
    ((4, 56), (3, 14), (4, 14), (1024, 14))
    """
    with open(path) as f:
        lines = [ln for ln in f.read().splitlines() if ln.strip()]
    layers, chars, bits = (int(v) for v in lines[0].split())
    row = 1
    main_params = np.array([_floats(lines[row + j]) for j in range(2 * layers)])
    row += 2 * layers
    extra_params = np.array([_floats(lines[row + j]) for j in range(3)])
    row += 3
    state = np.array([_floats(lines[row + j]) for j in range(2 * layers)])
    row += 2 * layers
    sequence = np.array([_floats(lines[row + j]) for j in range(chars)])
    assert main_params.shape == (2 * layers, 4 * bits) and sequence.shape == (chars, bits)
    return main_params, extra_params, state, sequence
