"""Small runtime helpers that generated modules carry with them (never imported from us).

Each helper is plain NumPy source, emitted verbatim into the generated module that uses it, so
the module stands alone. Keep them short and obvious: users read them.

>>> "def unbroadcast" in HELPERS["unbroadcast"]
True
"""

HELPERS = {
    "unbroadcast": '''\
def unbroadcast(g, shape):
    """Sum `g` down to `shape`: the adjoint of broadcasting a value of that shape."""
    g = np.asarray(g)
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for axis in range(len(shape)):
        if shape[axis] == 1 and g.shape[axis] != 1:
            g = g.sum(axis=axis, keepdims=True)
    return np.zeros(shape) + g
''',
}


def helper_source(names):
    """The source of the named helpers, in a fixed order."""
    return [HELPERS[n] for n in sorted(names)]
