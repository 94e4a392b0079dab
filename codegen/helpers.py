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
    "dot_adjoints": '''\
def dot_adjoints(g, a, b):
    """Adjoints of np.dot(a, b) for the output adjoint g, for any a, b of rank 0, 1 or 2."""
    a, b, g = np.asarray(a), np.asarray(b), np.asarray(g)
    if a.ndim > 2 or b.ndim > 2:
        raise ValueError("dot_adjoints: operands of rank 3 or more need a signature")
    if a.ndim == 0 or b.ndim == 0:
        return unbroadcast(g * b, a.shape), unbroadcast(g * a, b.shape)
    a2 = a.reshape((1, a.shape[0])) if a.ndim == 1 else a
    b2 = b.reshape((b.shape[0], 1)) if b.ndim == 1 else b
    g2 = g.reshape((a2.shape[0], b2.shape[1]))
    return np.dot(g2, b2.T).reshape(a.shape), np.dot(a2.T, g2).reshape(b.shape)
''',
    "matmul_adjoints": '''\
def matmul_adjoints(g, a, b):
    """Adjoints of np.matmul(a, b) for the output adjoint g, for operands of any rank (stacks
    of matrices broadcast against each other; a 1-D operand is a row or a column)."""
    a, b, g = np.asarray(a), np.asarray(b), np.asarray(g)
    if a.ndim <= 2 and b.ndim <= 2:
        return dot_adjoints(g, a, b)
    a2 = a.reshape((1, a.shape[0])) if a.ndim == 1 else a
    b2 = b.reshape((b.shape[0], 1)) if b.ndim == 1 else b
    g2 = np.expand_dims(g, -2) if a.ndim == 1 else g
    g2 = np.expand_dims(g2, -1) if b.ndim == 1 else g2
    a_bar = np.matmul(g2, np.swapaxes(b2, -1, -2))
    b_bar = np.matmul(np.swapaxes(a2, -1, -2), g2)
    return (unbroadcast(a_bar, a2.shape).reshape(a.shape),
            unbroadcast(b_bar, b2.shape).reshape(b.shape))
''',
}

HELPERS["add_along_axis"] = '''\
def add_along_axis(like, indices, values, axis):
    """The adjoint of np.take_along_axis(like, indices, axis): zeros shaped like `like`, with
    `values` added at `indices` along `axis` (repeated indices add up; `indices` broadcasts
    against the other axes as in take_along_axis)."""
    shape = np.shape(like)
    out = np.zeros(shape)
    flat_out = out.reshape(-1)
    flat_index = np.ascontiguousarray(indices).reshape(-1)
    g = np.ascontiguousarray(values)
    flat_g = g.reshape(-1)
    at = axis + len(shape) if axis < 0 else axis
    for k in range(flat_g.size):
        rest = k
        position = 0
        source = 0
        out_stride = 1
        index_stride = 1
        for d in range(len(shape) - 1, -1, -1):
            i = rest % g.shape[d]
            rest //= g.shape[d]
            if indices.shape[d] != 1:
                source += i * index_stride
            index_stride *= indices.shape[d]
        rest = k
        for d in range(len(shape) - 1, -1, -1):
            i = rest % g.shape[d]
            rest //= g.shape[d]
            if d == at:
                i = flat_index[source]
                if i < 0:
                    i += shape[d]
            position += i * out_stride
            out_stride *= shape[d]
        flat_out[position] += flat_g[k]
    return out
'''

HELPERS["around_axis"] = '''\
def around_axis(shape, axis):
    """(size before `axis`, its length, size after it) of an array of `shape`: the array seen
    as blocks of shape (before, length, after); the whole array flattened when axis is None."""
    if axis is None:
        size = 1
        for d in shape:
            size *= d
        return 1, size, 1
    at = axis + len(shape) if axis < 0 else axis
    before, after = 1, 1
    for d in range(len(shape)):
        if d < at:
            before *= shape[d]
        elif d > at:
            after *= shape[d]
    return before, shape[at], after
'''

HELPERS["add_taken"] = '''\
def add_taken(like, indices, values, axis):
    """The adjoint of np.take(like, indices, axis): zeros shaped like `like`, with `values`
    added at `indices` along `axis` (along the flattened array when `axis` is None); repeated
    indices add up, negative ones count from the end."""
    out = np.zeros(np.shape(like))
    before, length, after = around_axis(np.shape(like), axis)
    flat_index = np.ravel(np.asarray(indices))
    count = flat_index.size
    blocks = out.reshape((before, length, after))
    g = np.ascontiguousarray(np.asarray(values)).reshape((before, count, after))
    for p in range(before):
        for k in range(count):
            i = flat_index[k]
            if i < 0:
                i += length
            for q in range(after):
                blocks[p, i, q] += g[p, k, q]
    return out
'''

HELPERS["add_repeated"] = '''\
def add_repeated(like, values, repeats, axis):
    """The adjoint of np.repeat(like, repeats, axis): zeros shaped like `like`, each entry
    receiving the sum of its repeated copies in `values` (along the flattened array when `axis`
    is None; `repeats` one count, or a count per entry along the axis)."""
    out = np.zeros(np.shape(like))
    before, length, after = around_axis(np.shape(like), axis)
    counts = np.broadcast_to(np.ravel(np.asarray(repeats)), (length,))
    blocks = out.reshape((before, length, after))
    g = np.ascontiguousarray(np.asarray(values)).reshape((before, np.sum(counts), after))
    for p in range(before):
        k = 0
        for i in range(length):
            for _ in range(counts[i]):
                for q in range(after):
                    blocks[p, i, q] += g[p, k, q]
                k += 1
    return out
'''

# Index helpers of code whose small vectors are kept as scalars (autodiff_ast/scalarize.py):
# element j of a vector of unknown length, read where NumPy would broadcast it or slice it.
HELPERS["broadcast_index"] = '''\
def broadcast_index(m, j, n):
    """The index of element j of a vector of length m broadcast to length n: j, or 0 when m
    is one (NumPy's broadcasting; ValueError for any other length)."""
    if m == n:
        return j
    if m == 1:
        return 0
    raise ValueError("operands could not be broadcast together")
'''

HELPERS["slice_index"] = '''\
def slice_index(m, i, stop):
    """Index i of a vector of length m, read as an element of its slice [...:stop]
    (ValueError when m is less than stop: code with its small vectors kept as scalars needs
    the whole slice)."""
    if m < stop:
        raise ValueError("a constant slice runs past the end of the array")
    return i
'''

HELPERS["store_index"] = '''\
def store_index(m, j, n):
    """Index j of a row of length m, where a vector of length n is stored into it
    (ValueError unless m is n, as NumPy's assignment would raise)."""
    if m != n:
        raise ValueError("could not broadcast the vector into a row of the array")
    return j
'''

# The length check of vector arithmetic written as element loops (autodiff_ast/vector_loops.py).
HELPERS["same_length"] = '''\
def same_length(m, n):
    """The length of two vectors NumPy's arithmetic combines: m when it is n (ValueError
    otherwise: neither is one, or the code would not have been written as a loop)."""
    if m != n:
        raise ValueError("operands could not be broadcast together")
    return m
'''

# A loop whose bounds change between runs keeps the numbers its steps save in rows of a stack
# (autodiff_ast/reverse.py, _stack_plan): each run reserves its rows before it starts.
HELPERS["reserve_steps"] = '''\
def reserve_steps(stack, steps):
    """`stack` (a row per value saved, a column per step) when it has at least `steps`
    columns, else a copy of it with room for `steps` or twice its columns, whichever is more
    (what a growing list does: each value is copied O(1) times). The copy is a loop over the
    elements: Numba compiles a slice assignment with its shape-mismatch message, 3 s of a
    cold start."""
    if stack.shape[1] >= steps:
        return stack
    grown = np.empty((stack.shape[0], max(steps, 2 * stack.shape[1])))
    for r in range(stack.shape[0]):
        for k in range(stack.shape[1]):
            grown[r, k] = stack[r, k]
    return grown
'''

HELPERS["slice_start"] = '''\
def slice_start(n, lo):
    """Where the slice [lo:...] of a vector of length n starts (NumPy's rules: a negative
    bound counts from the end, and bounds are clipped to the vector)."""
    if lo < 0:
        lo += n
    return min(max(lo, 0), n)
'''

HELPERS["slice_length"] = '''\
def slice_length(n, lo, hi):
    """The length of the slice [lo:hi] of a vector of length n (NumPy's rules)."""
    if hi < 0:
        hi += n
    return max(min(max(hi, 0), n) - slice_start(n, lo), 0)
'''

HELPERS["cumprod_adjoint"] = '''\
def cumprod_adjoint(x, g):
    """The adjoint of np.cumprod(x, axis=-1) for the output adjoint g, exact where x has
    zeros: x_bar[j] = prod(x[:j]) * sum over i >= j of g[i] * prod(x[j + 1:i + 1])."""
    n = x.shape[-1]
    rows = np.ascontiguousarray(x).reshape((-1, n))
    g_rows = np.ascontiguousarray(g).reshape((-1, n))
    out = np.empty(rows.shape)
    for r in range(rows.shape[0]):
        before = 1.0
        for j in range(n):
            out[r, j] = before
            before *= rows[r, j]
        after = 0.0
        for j in range(n - 1, -1, -1):
            after += g_rows[r, j]
            out[r, j] *= after
            after *= rows[r, j]
    return out.reshape(x.shape)
'''

HELPERS["prod_others"] = '''\
def prod_others(x):
    """For each entry of x, the product of the other entries along the last axis (the
    derivative of np.prod), exact where x has zeros: prod(x[:j]) * prod(x[j + 1:])."""
    n = x.shape[-1]
    rows = np.ascontiguousarray(x).reshape((-1, n))
    out = np.empty(rows.shape, dtype=rows.dtype)
    for r in range(rows.shape[0]):
        before = 1.0
        for j in range(n):
            out[r, j] = before
            before *= rows[r, j]
        after = 1.0
        for j in range(n - 1, -1, -1):
            out[r, j] *= after
            after *= rows[r, j]
    return out.reshape(x.shape)
'''

HELPERS["prod_others_tangent"] = '''\
def prod_others_tangent(x, d):
    """The tangent of prod_others(x) for the input tangent d (x and d of one shape), exact
    where x has zeros: with P and S the products before and after entry j, the tangent is
    dP * S + P * dS, both carried along the last axis. Also prod_others' cotangent map: the
    second derivatives of a product are symmetric."""
    n = x.shape[-1]
    rows = np.ascontiguousarray(x).reshape((-1, n))
    d_rows = np.ascontiguousarray(d).reshape((-1, n))
    out = np.empty(rows.shape)
    before_rows = np.empty(n)
    for r in range(rows.shape[0]):
        before = 1.0
        before_dot = 0.0
        for j in range(n):
            out[r, j] = before_dot
            before_rows[j] = before
            before_dot = before_dot * rows[r, j] + before * d_rows[r, j]
            before *= rows[r, j]
        after = 1.0
        after_dot = 0.0
        for j in range(n - 1, -1, -1):
            out[r, j] = out[r, j] * after + before_rows[j] * after_dot
            after_dot = after_dot * rows[r, j] + after * d_rows[r, j]
            after *= rows[r, j]
    return out.reshape(x.shape)
'''

HELPERS["prod_others_second"] = '''\
def prod_others_second(x, d, e):
    """The second-order term of prod_others(x + s d + t e), the coefficient of s t (the
    tangent of prod_others_tangent(x, d) along e), exact where x has zeros: the products
    before and after entry j carried as value, d-part, e-part and d-e part."""
    n = x.shape[-1]
    rows = np.ascontiguousarray(x).reshape((-1, n))
    d_rows = np.ascontiguousarray(d).reshape((-1, n))
    e_rows = np.ascontiguousarray(e).reshape((-1, n))
    out = np.empty(rows.shape)
    kept = np.empty((4, n))
    for r in range(rows.shape[0]):
        p = 1.0
        p_d = 0.0
        p_e = 0.0
        p_de = 0.0
        for j in range(n):
            kept[0, j] = p
            kept[1, j] = p_d
            kept[2, j] = p_e
            kept[3, j] = p_de
            p_de = p_de * rows[r, j] + p_d * e_rows[r, j] + p_e * d_rows[r, j]
            p_d = p_d * rows[r, j] + p * d_rows[r, j]
            p_e = p_e * rows[r, j] + p * e_rows[r, j]
            p = p * rows[r, j]
        s = 1.0
        s_d = 0.0
        s_e = 0.0
        s_de = 0.0
        for j in range(n - 1, -1, -1):
            out[r, j] = kept[3, j] * s + kept[1, j] * s_e + kept[2, j] * s_d + \\
                kept[0, j] * s_de
            s_de = s_de * rows[r, j] + s_d * e_rows[r, j] + s_e * d_rows[r, j]
            s_d = s_d * rows[r, j] + s * d_rows[r, j]
            s_e = s_e * rows[r, j] + s * e_rows[r, j]
            s = s * rows[r, j]
    return out.reshape(x.shape)
'''

HELPERS["cumprod_tangent"] = '''\
def cumprod_tangent(x, d):
    """The tangent of np.cumprod(x, axis=-1) for the input tangent d, exact where x has
    zeros: y_dot[i] = y_dot[i - 1] * x[i] + y[i - 1] * d[i]."""
    n = x.shape[-1]
    rows = np.ascontiguousarray(x).reshape((-1, n))
    d_rows = np.ascontiguousarray(d).reshape((-1, n))
    out = np.empty(rows.shape)
    for r in range(rows.shape[0]):
        product = 1.0
        tangent = 0.0
        for j in range(n):
            tangent = tangent * rows[r, j] + product * d_rows[r, j]
            out[r, j] = tangent
            product *= rows[r, j]
    return out.reshape(x.shape)
'''

HELPERS["median_weights"] = '''\
def median_weights(x, axis):
    """How np.median(x, axis) reads x: 0.5 at each of the two middle entries of a stable
    sort along `axis` (1.0 at the middle entry of an odd count), 0 elsewhere."""
    moved = np.ascontiguousarray(np.moveaxis(x, axis, -1))
    n = moved.shape[-1]
    rows = moved.reshape((-1, n))
    out = np.zeros(rows.shape)
    for r in range(rows.shape[0]):
        order = np.argsort(rows[r], kind="mergesort")
        out[r, order[(n - 1) // 2]] += 0.5
        out[r, order[n // 2]] += 0.5
    return np.moveaxis(out.reshape(moved.shape), -1, axis)
'''

HELPERS["eigvalsh_tangent"] = '''\
def eigvalsh_tangent(a, d):
    """The tangent of np.linalg.eigvalsh(a), a symmetric, for the input tangent d: entry k is
    v_k . d v_k, v_k the k-th unit eigenvector (the same for d and its transpose)."""
    v = np.linalg.eigh(a)[1]
    return np.sum(v * np.dot(d, v), axis=0)
'''

HELPERS["matrix_power_tangent"] = '''\
def matrix_power_tangent(a, d, n):
    """The tangent of np.linalg.matrix_power(a, n), n >= 1, for the input tangent d: the sum
    over k < n of a^k d a^(n-1-k), built as t = t a + a^j d for j = 1, ..., n - 1 from
    t = d. The same sum of a's transpose and the output's adjoint is a's adjoint."""
    t = d
    p = a
    for j in range(1, n):
        t = t @ a + p @ d
        p = p @ a
    return t
'''

HELPERS["singular_value_tangents"] = '''\
def singular_value_tangents(a, d):
    """The tangent of np.linalg.svd(a, compute_uv=False) for the input tangent d: entry k is
    u_k . d v_k, u_k and v_k the k-th left and right singular vectors."""
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return np.sum(u * np.dot(d, vh.T), axis=0)
'''

HELPERS["singular_norm_slope"] = '''\
def singular_norm_slope(x, order):
    """The derivative of np.linalg.norm(x, order) of a matrix x for order 2 (its largest
    singular value), -2 (its smallest) or 0, standing for 'nuc' (their sum): u diag(w) vh of
    the reduced SVD x = u diag(s) vh, w being 1 for 'nuc' and, for 2 and -2, an equal share
    1/k to each of k tied singular values (as np.max and np.min share)."""
    u, s, vh = np.linalg.svd(x, full_matrices=False)
    w = np.ones(s.shape[0])
    if order == 2:
        w = 1.0 * (s == np.max(s))
    if order == -2:
        w = 1.0 * (s == np.min(s))
    if order != 0:
        w = w / np.sum(w)
    return np.dot(u * w, vh)
'''

HELPERS["svd_tangents"] = '''\
def svd_tangents(u, s, vh, d):
    """The tangents (u_dot, s_dot, vh_dot) of the reduced SVD (u, s, vh) =
    np.linalg.svd(a, full_matrices=False) for the input tangent d. With p = u^T d v and
    f[i, j] = 1 / (s[j]^2 - s[i]^2) (0 where two singular values are equal, as in JAX):
    s_dot = diag(p), u_dot = u (f * (p s + s p^T)) + (1 - u u^T) d v / s,
    vh_dot = -(f * (s p + p^T s)) vh + u^T d (1 - v v^T) / s (1 / s taken as 0 at 0)."""
    dv = np.dot(d, vh.T)
    p = np.dot(u.T, dv)
    squares = s * s  # (apart: a multiply-add would leave the diagonal's gaps nonzero)
    gaps = squares - squares[:, None]
    same = 1.0 * (gaps == 0.0)
    f = 1.0 / (gaps + same) - same
    zero = 1.0 * (s == 0.0)
    s_inv = 1.0 / (s + zero) - zero
    u_dot = np.dot(u, f * (p * s + s[:, None] * p.T)) + (dv - np.dot(u, p)) * s_inv
    twist = f * (s[:, None] * p + p.T * s)
    vh_dot = s_inv[:, None] * (np.dot(u.T, d) - np.dot(p, vh)) - np.dot(twist, vh)
    return u_dot, np.diag(p), vh_dot
'''

#: Helpers that a helper calls (emitted with it).
HELPERS["diagonal_adjoint"] = '''\
def diagonal_adjoint(g, like):
    """The adjoint of np.diagonal over the last two axes (np.diag of a matrix): `g` on each
    matrix's diagonal, zeros elsewhere, shaped like `like` (a rectangular matrix too: g runs
    down the shorter side). For a vector `like` (np.diag made it a matrix), g's diagonal.
    (No writes in place: higher derivatives differentiate this code too.)"""
    if like.ndim == 1:
        return np.diag(g)
    rows, cols = like.shape[-2], like.shape[-1]
    if rows <= cols:
        return g[..., :, None] * np.eye(rows, cols)
    return g[..., None, :] * np.eye(rows, cols)
'''

HELPERS["last_writes"] = '''\
def last_writes(positions):
    """Which writes of `y[index] = v` reach y: `positions` holds, for each write (index
    integer arrays, broadcast), the number of the element it writes; the result is True
    where no later write (in C order) names the same element. Of repeated writes NumPy keeps
    the last, so only that one gets y's cotangent."""
    flat = positions.ravel()
    order = np.argsort(flat, kind="mergesort")
    ranked = flat[order]
    last = np.ones(flat.shape[0], dtype=np.bool_)
    last[:-1] = ranked[1:] != ranked[:-1]
    keep = np.empty(flat.shape[0], dtype=np.bool_)
    keep[order] = last
    return keep.reshape(positions.shape)
'''

HELPERS["along_axes"] = '''\
def along_axes(mask, trailing):
    """`mask` with `trailing` new axes after its own: it multiplies an array whose axes
    after the mask's are that many (code written for arrays of any rank)."""
    return np.reshape(mask, np.shape(mask) + (1,) * trailing)
'''

HELPER_DEPENDS = {"slice_length": ("slice_start",), "dot_adjoints": ("unbroadcast",),
                  "matmul_adjoints": ("dot_adjoints", "unbroadcast"),
                  "add_taken": ("around_axis",), "add_repeated": ("around_axis",)}


def helper_names():
    """The names of the helpers a generated module may carry (HELPERS) and of those jit's
    dialect pass may add (DIALECT_HELPERS): no function of the user's is emitted under one.

    >>> {"unbroadcast", "outer_product", "exp_fast"} <= helper_names()
    True
    """
    return set(HELPERS) | set(DIALECT_HELPERS)


def helper_source(names):
    """The source of the named helpers and those they call, in a fixed order.

    >>> [s.split("(")[0] for s in helper_source({"dot_adjoints"})]
    ['def dot_adjoints', 'def unbroadcast']
    """
    wanted = set(names)
    for n in list(wanted):
        wanted.update(HELPER_DEPENDS.get(n, ()))
    return [HELPERS[n] for n in sorted(wanted)]


# ---------------------------------------------------------------- the compiled dialect
# Helpers the dialect pass (codegen/dialect.py) emits in place of NumPy features Numba's nopython
# mode lacks. Each runs the same in plain Python and under numba.njit: loops and the NumPy
# subset Numba supports. `x.ndim == k` tests are constants to Numba, which drops the branches
# that do not apply before typing them, so one helper serves every rank.
DIALECT_HELPERS = {
    "stack_list": '''\
def stack_list(arrays):
    """np.stack(arrays) for a list of arrays of one shape, or of numbers (along a new first
    axis), copied element by element (Numba compiles that much faster than
    `out[i] = arrays[i]`)."""
    first = np.asarray(arrays[0])
    out = np.empty((len(arrays),) + first.shape, dtype=first.dtype)
    flat = out.reshape(-1)
    size = first.size
    for i in range(len(arrays)):
        if np.asarray(arrays[i]).shape != first.shape:
            raise ValueError("all input arrays must have the same shape")
        item = np.ravel(np.asarray(arrays[i]))
        for j in range(size):
            flat[i * size + j] = item[j]
    return out
''',
    "add_into": '''\
def add_into(view, v):
    """`a[index] += v` where `a[index]` is a view (basic slicing): added in place, NumPy
    broadcasting (Numba compiles this faster than an array assigned into a slice)."""
    view += v
''',
    "add_at": '''\
def add_at(a, i, v):
    """`a[i] += v` for one integer `i`: a row added in place when `a` has two or more axes."""
    if a.ndim == 1:
        a[i] += v
    else:
        row = a[i]
        row += v
''',
    "subtract_at": '''\
def subtract_at(a, i, v):
    """`a[i] -= v` for one integer `i`: a row subtracted in place when `a` has two or more
    axes (what `add_at(a, i, -v)` adds, without the negated copy)."""
    if a.ndim == 1:
        a[i] -= v
    else:
        row = a[i]
        row -= v
''',
    "outer_product": '''\
def outer_product(a, b):
    """np.outer(a, b) written as loops (Numba compiles them faster than its np.outer)."""
    a1 = np.ravel(a)
    b1 = np.ravel(b)
    out = np.empty((a1.size, b1.size), dtype=(a1[:1] * b1[:1]).dtype)
    for i in range(a1.size):
        for j in range(b1.size):
            out[i, j] = a1[i] * b1[j]
    return out
''',
    "add_outer_at": '''\
def add_outer_at(a, i, u, v):
    """`a[i] += np.outer(u, v)` without the temporary: loops adding into the matrix a[i]
    when `a` has three axes and u and v one (otherwise outer_product, then add_at). The
    loops index `a` itself: a view of the row (and np.ravel's of u and v) cost reference
    counting on every call, 3.1 -> 1.3 ms over ADBench GMM's 25,000 calls."""
    if a.ndim == 3 and u.ndim == 1 and v.ndim == 1:
        if a.shape[1] == u.shape[0] and a.shape[2] == v.shape[0]:
            for p in range(u.shape[0]):
                up = u[p]
                for q in range(v.shape[0]):
                    a[i, p, q] += up * v[q]
            return
    add_at(a, i, outer_product(u, v))
''',
    "reassociated_sum": '''\
def reassociated_sum(x):
    """np.sum(x) over every element, compiled with reassociation allowed (partial sums in SIMD
    lanes: about 10x faster than Numba's one running total, and no less accurate)."""
    return np.sum(x)
''',
    "keep_axis": '''\
def keep_axis(r, axis):
    """`r`, reduced over `axis`, with that axis put back with size one (keepdims=True)."""
    return np.expand_dims(np.asarray(r), axis)
''',
    "mean_axis": '''\
def mean_axis(x, axis):
    """np.mean(x, axis=axis) for one integer axis."""
    return np.sum(x, axis=axis) / x.shape[axis]
''',
    "var_axis": '''\
def var_axis(x, axis, ddof):
    """np.var(x, axis=axis, ddof=ddof) for one integer axis."""
    centered = x - keep_axis(mean_axis(x, axis), axis)
    return np.sum(centered * centered, axis=axis) / (x.shape[axis] - ddof)
''',
    "flip_axis": '''\
def flip_axis(x, axis):
    """np.flip(x, axis) for one integer axis."""
    moved = np.moveaxis(x, axis, 0)
    return np.ascontiguousarray(np.moveaxis(moved[::-1], 0, axis))
''',
    "roll_axis": '''\
def roll_axis(x, shift, axis):
    """np.roll(x, shift, axis) for one integer axis."""
    moved = np.moveaxis(x, axis, 0)
    n = moved.shape[0]
    s = shift % n if n > 0 else 0
    out = np.empty_like(moved)
    out[s:] = moved[:n - s]
    out[:s] = moved[n - s:]
    return np.ascontiguousarray(np.moveaxis(out, 0, axis))
''',
    "cumprod_axis": '''\
def cumprod_axis(x, axis):
    """np.cumprod(x, axis=axis) for one integer axis (Numba's cumprod flattens)."""
    moved = np.ascontiguousarray(np.moveaxis(x, axis, -1))
    out = np.empty(moved.shape)
    rows = moved.reshape((-1, moved.shape[-1]))
    out_rows = out.reshape(rows.shape)
    for r in range(rows.shape[0]):
        product = 1.0
        for j in range(rows.shape[1]):
            product *= rows[r, j]
            out_rows[r, j] = product
    return np.ascontiguousarray(np.moveaxis(out, -1, axis))
''',
    "weighted_average": '''\
def weighted_average(a, axis, w):
    """np.average(a, axis=axis, weights=w) for one integer axis: w shaped like a, or a
    vector along the axis (Numba's average takes no axis)."""
    if w.ndim == 1 and a.ndim > 1:
        return np.sum(np.moveaxis(a, axis, -1) * w, axis=-1) / np.sum(w)
    return np.sum(a * w, axis=axis) / np.sum(w, axis=axis)
''',
    "number_if_vector": '''\
def number_if_vector(c, m):
    """np.cov(m) as a number when m is a vector (Numba gives a 0-d array, where the code
    around it reads a number, as NumPy's 0-d result is)."""
    if m.ndim == 1:
        return c.sum()
    return c
''',
    "polyval_horner": '''\
def polyval_horner(p, x):
    """np.polyval(p, x) by Horner's rule, highest power first (Numba has no polyval)."""
    y = x * 0.0
    for k in range(len(p)):
        y = y * x + p[k]
    return y
''',
    "median_axis": '''\
def median_axis(x, axis):
    """np.median(x, axis=axis) for one integer axis (Numba's median takes no axis)."""
    moved = np.ascontiguousarray(np.moveaxis(x, axis, -1))
    rows = moved.reshape((-1, moved.shape[-1]))
    out = np.empty(rows.shape[0])
    for r in range(rows.shape[0]):
        out[r] = np.median(rows[r])
    return out.reshape(moved.shape[:-1])
''',
    "sort_axis": '''\
def sort_axis(x, axis):
    """np.sort(x, axis=axis) for one integer axis (Numba sorts along the last axis only)."""
    if x.ndim == 1:
        return np.sort(x)
    moved = np.ascontiguousarray(np.moveaxis(x, axis, -1))
    return np.ascontiguousarray(np.moveaxis(np.sort(moved), -1, axis))
''',
    "argsort_axis": '''\
def argsort_axis(x, axis):
    """np.argsort(x, axis=axis, kind="stable") for one integer axis: tied entries keep their
    order (Numba's argsort takes 1-D arrays only)."""
    if x.ndim == 1:
        return np.argsort(x, kind="mergesort")
    moved = np.ascontiguousarray(np.moveaxis(x, axis, -1))
    count = 1  # (not reshape -1: the axis may be empty)
    for size in moved.shape[:-1]:
        count *= size
    rows = moved.reshape((count, moved.shape[-1]))
    out = np.empty(rows.shape, dtype=np.int64)
    for i in range(rows.shape[0]):
        out[i] = np.argsort(rows[i], kind="mergesort")
    return np.ascontiguousarray(np.moveaxis(out.reshape(moved.shape), -1, axis))
''',
    "take_axis": '''\
def take_axis(a, indices, axis):
    """np.take(a, indices, axis=axis) for one integer axis and indices of any rank (Numba's
    np.take along an axis takes a vector of indices): the taken entries along the axis, their
    index axes then moved where the axis stood."""
    if a.ndim == 1:  # (a number for one index, as np.take gives)
        return np.take(a, indices)
    index = np.asarray(indices)
    at = axis + a.ndim if axis < 0 else axis
    picked = np.moveaxis(np.take(a, np.ravel(index), axis=at), at, 0)
    out = np.ascontiguousarray(picked).reshape(index.shape + picked.shape[1:])
    for _ in range(index.ndim):
        out = np.moveaxis(out, 0, at + index.ndim - 1)
    return np.ascontiguousarray(out)
''',
    "repeat_axis": '''\
def repeat_axis(a, repeats, axis):
    """np.repeat(a, repeats, axis=axis) for one integer axis (Numba's np.repeat flattens):
    `repeats` one count, or a count per entry along the axis."""
    at = axis + a.ndim if axis < 0 else axis
    moved = np.ascontiguousarray(np.moveaxis(a, at, 0))
    length = moved.shape[0]
    counts = np.broadcast_to(np.ravel(np.asarray(repeats)), (length,))
    rows = moved.reshape((length, moved.size // max(length, 1)))
    out = np.empty((np.sum(counts), rows.shape[1]), dtype=rows.dtype)
    k = 0
    for i in range(length):
        for _ in range(counts[i]):
            out[k] = rows[i]
            k += 1
    picked = out.reshape((out.shape[0],) + moved.shape[1:])
    return np.ascontiguousarray(np.moveaxis(picked, 0, at))
''',
    "tile_count": '''\
def tile_count(a, reps):
    """np.tile(a, reps) for one integer count (Numba has no np.tile): `reps` copies of `a`
    side by side along its last axis (a number becomes a vector of `reps` entries)."""
    whole = np.atleast_1d(np.asarray(a))
    length = whole.shape[-1]
    rows = np.ascontiguousarray(whole).reshape((whole.size // max(length, 1), length))
    count = max(reps, 0)
    out = np.empty((rows.shape[0], length * count), dtype=rows.dtype)
    for r in range(count):
        out[:, r * length:(r + 1) * length] = rows
    return out.reshape(whole.shape[:-1] + (length * count,))
''',
    "tile_rows_columns": '''\
def tile_rows_columns(a, rows, columns):
    """np.tile(a, (rows, columns)) (Numba has no np.tile): the last two axes of `a` (a vector
    is one row, a number one element) repeated `rows` times down and `columns` across."""
    whole = np.atleast_2d(np.asarray(a))
    m, n = whole.shape[-2], whole.shape[-1]
    stack = np.ascontiguousarray(whole).reshape((whole.size // max(m * n, 1), m, n))
    down, across = max(rows, 0), max(columns, 0)
    out = np.empty((stack.shape[0], m * down, n * across), dtype=stack.dtype)
    for p in range(stack.shape[0]):
        for i in range(down):
            for j in range(across):
                out[p, i * m:(i + 1) * m, j * n:(j + 1) * n] = stack[p]
    return out.reshape(whole.shape[:-2] + (m * down, n * across))
''',
    "scatter_add": '''\
def scatter_add(b, index, g):
    """np.add.at(b, index, g) for one integer index array: repeated indices accumulate; `g`
    broadcasts to the shape of b[index] as in NumPy."""
    g = np.broadcast_to(g, index.shape + b.shape[1:])
    if b.ndim == 1:
        for k in np.ndindex(index.shape):
            b[index[k]] += g[k]
    elif b.ndim == 2 and index.ndim == 1:
        for k in range(index.shape[0]):
            row = index[k]
            for j in range(b.shape[1]):
                b[row, j] += g[k, j]
    else:
        for k in np.ndindex(index.shape):
            b[index[k]] += g[k]
''',
    "dot_nd": '''\
def dot_nd(a, b):
    """np.dot for operands of any rank and dtype (Numba's np.dot takes 1-D and 2-D arrays of
    one float or complex dtype)."""
    if a.ndim <= 2 and b.ndim <= 2:
        return dot_of_any_dtype(a, b)
    rows = np.ascontiguousarray(a).reshape((-1, a.shape[-1]))
    if b.ndim == 1:
        return dot_of_any_dtype(rows, b).reshape(a.shape[:-1])
    # b's second-to-last axis first, as a (that axis, the rest) matrix: copied in loops
    # (np.moveaxis took Numba ~8 s to compile here; these loops under 1 s)
    m, q = b.shape[b.ndim - 2], b.shape[b.ndim - 1]
    p = 1
    for axis in range(b.ndim - 2):
        p *= b.shape[axis]
    stack = np.ascontiguousarray(b).reshape((p, m, q))
    columns = np.empty((m, p, q), dtype=stack.dtype)
    for j in range(m):
        for r in range(p):
            for k in range(q):
                columns[j, r, k] = stack[r, j, k]
    out = dot_of_any_dtype(rows, columns.reshape((m, p * q)))
    return out.reshape(a.shape[:-1] + b.shape[:-2] + (q,))
''',
    "matmul_nd": '''\
def matmul_nd(a, b):
    """a @ b for operands of any rank and dtype (Numba's @ takes 1-D and 2-D arrays of one
    float or complex dtype): a loop over the stacked matrices, their batch axes broadcast
    against each other as np.matmul does."""
    if a.ndim <= 2 and b.ndim <= 2:
        return dot_of_any_dtype(a, b)
    if a.ndim == 1 or b.ndim == 1 or b.ndim == 2:
        return dot_nd(a, b)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a_stack = np.broadcast_to(a, batch + a.shape[-2:])
    b_stack = np.broadcast_to(b, batch + b.shape[-2:])
    dtype = (np.zeros(1, dtype=a.dtype) * np.zeros(1, dtype=b.dtype)).dtype
    out = np.empty(batch + (a.shape[-2], b.shape[-1]), dtype=dtype)
    for index in np.ndindex(batch):
        out[index] = dot_of_any_dtype(np.ascontiguousarray(a_stack[index]),
                                      np.ascontiguousarray(b_stack[index]))
    return out
''',
    "unbroadcast": '''\
def unbroadcast(g, shape):
    """Sum `g` down to `shape`: the adjoint of broadcasting a value of that shape (loops); where
    g has size one and shape does not, g is copied along that axis (as np.zeros(shape) + g)."""
    garr = np.asarray(g)
    if len(shape) == 0:
        return np.sum(garr)
    out = np.zeros(shape)
    flat_g = np.ravel(garr)
    if garr.ndim == 0:  # (garr is not an argument: Numba types this branch for every rank)
        return out + flat_g[0]
    flat_out = out.reshape(-1)
    lead = garr.ndim - len(shape)
    for k in range(flat_g.size):
        rest = k
        position = 0
        stride = 1
        for axis in range(garr.ndim - 1, -1, -1):
            i = rest % garr.shape[axis]
            rest //= garr.shape[axis]
            out_axis = axis - lead
            if out_axis >= 0:
                if shape[out_axis] != 1:
                    position += i * stride
                stride *= shape[out_axis]
        flat_out[position] += flat_g[k]
    spread = False  # g has size one (or no axis) where shape does not: copy along those axes
    for axis in range(len(shape)):
        if shape[axis] != 1 and (axis + lead < 0 or garr.shape[axis + lead] == 1):
            spread = True
    if spread:
        for k in range(flat_out.size):
            rest = k
            source = 0
            stride = 1
            for axis in range(len(shape) - 1, -1, -1):
                i = rest % shape[axis]
                rest //= shape[axis]
                if axis + lead >= 0 and garr.shape[axis + lead] != 1:
                    source += i * stride
                stride *= shape[axis]
            flat_out[k] = flat_out[source]
    return out
''',
}


# np.max / np.min / np.prod over one axis: Numba has only the whole-array forms, so each row of
# the axis moved last is reduced in a loop. A 2-D array's max or min (a softmax's shift) takes
# two plain loops instead: the moveaxis/reshape form took Numba 4.6 s to compile for one 2-D
# max (the MLP gradient's cold compile: 9.6 s), the loops ~0.3 s.
_REDUCE_ALONG_AXIS = '''\
def {op}_axis(x, axis):
    """np.{op}(x, axis=axis) for one integer axis."""
    if x.ndim == 1:
        return {whole}
{two_d}    moved = np.ascontiguousarray(np.moveaxis(x, axis, -1))
    count = 1  # (not reshape -1: the axis may be empty)
    for size in moved.shape[:-1]:
        count *= size
    rows = moved.reshape((count, moved.shape[-1]))
    out = np.empty(rows.shape[0], dtype={dtype})
    for i in range(rows.shape[0]):
        out[i] = {row}
    return out.reshape(moved.shape[:-1])
'''
_EXTREME_2D = '''\
    if x.ndim == 2:  # (a NaN wins and stays: nothing compares past it, as in np.{op})
        along = axis + 2 if axis < 0 else axis
        length = x.shape[along]
        others = x.shape[1 - along]
        if length == 0:
            raise ValueError("zero-size array to reduction operation {name} which has no "
                             "identity")
        out = np.empty(others, dtype=x.dtype)
        for o in range(others):
            best = x[0, o] if along == 0 else x[o, 0]
            for k in range(1, length):
                v = x[k, o] if along == 0 else x[o, k]
                if v {cmp} best or v != v:
                    best = v
            out[o] = best
        return out
'''
# (a product of small integers or booleans is an int64, as in NumPy)
for _op, _whole, _row, _dtype, _two_d in (
        ("max", "x.max()", "rows[i].max()", "x.dtype",
         _EXTREME_2D.format(op="max", name="maximum", cmp=">")),
        ("min", "x.min()", "rows[i].min()", "x.dtype",
         _EXTREME_2D.format(op="min", name="minimum", cmp="<")),
        ("prod", "np.prod(x)", "np.prod(rows[i])", "np.asarray(np.prod(rows[:0])).dtype", "")):
    DIALECT_HELPERS[f"{_op}_axis"] = _REDUCE_ALONG_AXIS.format(op=_op, whole=_whole, row=_row,
                                                               dtype=_dtype, two_d=_two_d)

DIALECT_HELPERS["full_like_any"] = '''\
def full_like_any(a, v):
    """np.full_like(a, v) for a fill value `v` that may be an array (broadcast to a's shape):
    reverse mode's cotangent of a number, which at second order can come out an array."""
    return np.full_like(a, v)
'''

DIALECT_HELPERS["index_array"] = '''\
def index_array(a):
    """An index among several index arrays of a subscript (``y[mask, cols]``): a 1-D boolean
    mask as the positions of its True entries (what NumPy does with it there), anything else
    as it is."""
    if isinstance(a, np.ndarray) and a.dtype == np.bool_ and a.ndim == 1:
        return np.nonzero(a)[0]
    return a
'''

DIALECT_HELPERS["mask_read"] = '''\
def mask_read(a, mask):
    """`a[mask]` for a boolean mask: its True entries' values, in C order."""
    return a[mask]
'''

DIALECT_HELPERS["mask_store"] = '''\
def mask_store(a, mask, v):
    """`a[mask] = v` for a boolean mask: each True entry set to v, or to v's values in C
    order."""
    a[mask] = v
'''

DIALECT_HELPERS["first_axis_last"] = '''\
def first_axis_last(x):
    """np.ascontiguousarray(np.moveaxis(x, 0, -1)) as one copying loop over x seen as a
    (first axis, the rest) matrix: jacfwd's last step. Numba took ~6 s to compile np.moveaxis
    and ~0.5 s for this."""
    n = x.shape[0]
    m = 1
    for axis in range(1, x.ndim):
        m *= x.shape[axis]
    flat = np.ascontiguousarray(x).reshape((n, m))
    out = np.empty((m, n), dtype=x.dtype)
    for j in range(m):
        for k in range(n):
            out[j, k] = flat[k, j]
    return out.reshape(x.shape[1:] + (n,))
'''

DIALECT_HELPERS["batched_outer"] = '''\
def batched_outer(a, b):
    """`a[:, :, None] * b[:, None, :]`: the outer product of each row of a with the same row
    of b (vmap's form of np.outer, and of a dense layer's weight adjoint per example)."""
    return a[:, :, None] * b[:, None, :]


@numba.extending.overload(batched_outer, jit_options={'error_model': 'numpy'})
def batched_outer_numba(a, b):
    """How Numba compiles batched_outer: for float64 matrices with as many rows, one loop
    nest writing each element once (Numba's broadcast of the two views took 2.7x longer:
    per-example MLP weight gradients, 1000 x 32 x 10); the expression otherwise."""
    matrices = all(isinstance(v, numba.types.Array) and v.ndim == 2 and
                   v.dtype == numba.types.float64 for v in (a, b))
    if not matrices:
        return lambda a, b: a[:, :, None] * b[:, None, :]

    def loops(a, b):
        if a.shape[0] != b.shape[0]:
            return a[:, :, None] * b[:, None, :]
        out = np.empty((a.shape[0], a.shape[1], b.shape[1]))
        for k in range(a.shape[0]):
            for i in range(a.shape[1]):
                g = a[k, i]
                for j in range(b.shape[1]):
                    out[k, i, j] = g * b[k, j]
        return out
    return loops
'''

# np.tanh under Numba: Numba calls libm once per element (18x slower than NumPy's on 1024 x
# 128). tanh_of_number is arithmetic LLVM vectorizes: tanh(x) = -m / (2 + m), m =
# expm1(-2|x|) from a Cody-Waite reduction, exp_fast's expm1_of_reduced and 2**k built in the
# exponent bits (exp_fast's float_from_bits): no call, no branch. Within 3 ulp of np.tanh
# (1e6 values at each of several scales); signs, zeros, inf and nan as np.tanh. A float64
# number (the element loops jit writes: an LSTM cell's tanh(cell_j)) takes it directly
# (25,000 numbers in a loop: 137 -> 57 us; it was a Taylor polynomial near zero and a call of
# exp elsewhere); a float array of 256 elements or more takes one loop of it (1024 x 128:
# 270 us against 330 for the chunked two-loop form it replaced, which built 2**k through an
# int64 view of a buffer). Other numbers, integer arrays and short arrays keep np.tanh.
DIALECT_HELPERS["tanh_fast"] = '''\
def tanh_fast(x):
    """np.tanh(x) (under Numba, arrays take the vectorized loop of tanh_fast_numba)."""
    return np.tanh(x)


# (compiled once, LLVM inlines it: as exp_of_number)
@numba.njit(error_model='numpy', fastmath={'contract'})
def tanh_of_number(x):
    """tanh(x) for a float64 x without a call or a branch: tanh(x) = -m / (2 + m) with
    m = exp(-2|x|) - 1; y = -2|x| = k ln2 + r, m = 2**k (1 + q) - 1, q = exp(r) - 1
    (expm1_of_reduced) and 2**k from exponent bits (float_from_bits), both from exp_fast."""
    y = max(-2.0 * abs(x), -700.0)  # (tanh is 1.0 long before)
    k = np.floor(y * 1.4426950408889634 + 0.5)
    r = (y - k * 0.6931471803691238) - k * 1.9082149292705877e-10
    scale = float_from_bits((np.int64(k) + 1023) << 52)
    expm1 = (scale - 1.0) + scale * expm1_of_reduced(r)
    tanh = np.copysign(-expm1 / (2.0 + expm1), x)
    return tanh if x == x else x


@numba.extending.overload(tanh_fast, jit_options={'error_model': 'numpy'})
def tanh_fast_numba(x):
    """How Numba compiles tanh_fast: a float64 number by tanh_of_number, a float array of
    256 elements or more in one loop of it over its elements (which LLVM vectorizes: 6x
    faster than np.tanh under Numba; within 3 ulp of it); other numbers, integer arrays and
    shorter arrays with np.tanh."""
    if x == numba.types.float64:
        return lambda x: tanh_of_number(x)
    if not (isinstance(x, numba.types.Array) and isinstance(x.dtype, numba.types.Float)) or \\
            x.ndim == 0:
        return lambda x: np.tanh(x)

    def tanh_array(x):
        if x.size < 256:  # a short vector keeps np.tanh (Numba's, within an ulp of NumPy's)
            return np.tanh(x)
        out = np.empty(x.shape, dtype=x.dtype)
        flat = x.ravel()
        o = out.reshape(-1)
        for i in range(flat.shape[0]):
            o[i] = tanh_of_number(np.float64(flat[i]))
        return out
    return tanh_array
'''

# np.exp and math.exp under Numba: Numba calls libm's exp once per element, and a call keeps
# LLVM from vectorizing the loop around it (a loop of log-sum-exp, a sigmoid in a row loop).
# exp_fast's number form is arithmetic only: a Cody-Waite reduction x = k ln2 + r
# (|r| <= ln2 / 2), exp(r) from its degree-13 Taylor polynomial (the first term left out,
# r**14 / 14!, is below 5e-18), and 2**k built in the exponent bits of two factors (so that
# 2**k for k in -1075..1587 needs no special case: a product that overflows is inf, one that
# underflows goes through the subnormals to 0). No branch, no call: LLVM vectorizes the loops
# it sits in. Within 1 ulp of NumPy's exp over [-745, 710] (1e6 random values), subnormals
# within one unit of the last place; inf, -inf, nan, +-0 as np.exp (tests/test_fast_exp.py).
# 25,000 elements: 26 us against 106 us for Numba's np.exp (one process, session 29). Float64
# arrays take one loop over their elements; other numbers and arrays keep np.exp.
DIALECT_HELPERS["exp_fast"] = '''\
def exp_fast(x):
    """np.exp(x) (under Numba, float64 numbers and arrays take exp_of_number: arithmetic that
    LLVM vectorizes)."""
    return np.exp(x)


@numba.extending.intrinsic
def float_from_bits(typingctx, bits):
    """The float64 whose bits are the int64 `bits` (exp_of_number builds 2**k this way)."""
    def codegen(context, builder, signature, args):
        from llvmlite import ir
        return builder.bitcast(args[0], ir.DoubleType())
    return numba.types.float64(numba.types.int64), codegen


@numba.njit(inline='always', error_model='numpy', fastmath={'contract'})
def expm1_of_reduced(r):
    """exp(r) - 1 for |r| <= ln2 / 2: r (1/1! + r/2! + ... + r**12/13!). The terms from
    r**4/5! on are summed in Estrin's order (pairs, then pairs of pairs), the first four by
    Horner's rule: nine steps deep where Horner's alone is thirteen (for a chain of steps each
    waiting for the last exp, as a recurrence), and as accurate as Horner's (Estrin's order
    for every term put some tanh values 4 ulp from NumPy's)."""
    r2 = r * r
    r4 = r2 * r2
    a4 = 0.008333333333333333 + 0.001388888888888889 * r  # 1/5!, 1/6!
    a6 = 0.0001984126984126984 + 2.48015873015873e-05 * r
    a8 = 2.7557319223985893e-06 + 2.755731922398589e-07 * r
    a10 = 2.505210838544172e-08 + 2.08767569878681e-09 * r
    tail = (a4 + a6 * r2) + (a8 + a10 * r2) * r4 + 1.6059043836821613e-10 * (r4 * r4)  # ... 1/13!
    return r * (1.0 + r * (0.5 + r * (0.16666666666666666 + r * (0.041666666666666664 + r * tail))))


# Not inline='always' (Numba's IR inlining): compiled once with its own flags, where an
# inlined copy was typed and lowered again in each caller and each caller's fastmath set
# (GMM's gradient built exp_fast twice); LLVM still inlines the call, so loops of it
# vectorize as before (25,000 numbers: 31 us either way; tests/test_fast_exp.py).
@numba.njit(error_model='numpy', fastmath={'contract'})
def exp_of_number(x):
    """exp(x) for a float64 x without a call or a branch: x = k ln2 + r, exp(r) from its
    Taylor polynomial, 2**k = 2**(k // 2) * 2**(k - k // 2) from exponent bits."""
    y = min(max(x, -1100.0), 1100.0)
    k = np.floor(y * 1.4426950408889634 + 0.5)
    r = (y - k * 0.6931471803691238) - k * 1.9082149292705877e-10
    p = 1.0 + expm1_of_reduced(r)
    half = np.int64(k) >> 1
    scaled = p * float_from_bits((half + 1023) << 52)
    scaled *= float_from_bits((np.int64(k) - half + 1023) << 52)
    return scaled if x == x else x


@numba.extending.overload(exp_fast, jit_options={'error_model': 'numpy'})
def exp_fast_numba(x):
    """How Numba compiles exp_fast: a float64 number by exp_of_number, a float64 array in
    one loop of exp_of_number over its elements (a new C-order array of x's shape); anything
    else np.exp."""
    if x == numba.types.float64:
        return lambda x: exp_of_number(x)
    if not (isinstance(x, numba.types.Array) and x.dtype == numba.types.float64) or \\
            x.ndim == 0:
        return lambda x: np.exp(x)

    def exp_array(x):
        out = np.empty(x.shape, dtype=np.float64)
        flat = out.reshape(-1)
        values = x.ravel()
        for i in range(flat.shape[0]):
            flat[i] = exp_of_number(values[i])
        return out
    return exp_array
'''

# np.sum(a * b) under Numba: one loop multiplying and adding (reassociated: partial sums in SIMD
# lanes) instead of an array expression writing a * b to a temporary and a second pass summing
# it (linear regression's gradient, 1e6 points: 1.14 -> 0.79 ms). In loops over small vectors
# the temporary is the cost (a 10-element sum 25,000 times: 1.31 -> 0.92 ms); there the helper
# must compile to a loop with no call in it, or Numba will not inline it (a shape-tuple test
# with np.sum(a * b) as the fallback ran 2.6 ms).
DIALECT_HELPERS["sum_of_products"] = '''\
def sum_of_products(a, b):
    """np.sum(a * b) (under Numba, two float64 vectors, or two C-contiguous float64 arrays of
    one shape, take one loop)."""
    return np.sum(a * b)


@numba.extending.overload(sum_of_products, jit_options={
    'error_model': 'numpy', 'fastmath': {'reassoc', 'contract'}})
def sum_of_products_numba(a, b):
    """How Numba compiles sum_of_products: two float64 vectors (one may have length one and
    broadcast) in one loop; two C-contiguous float64 arrays of one shape (two or three axes)
    in one loop over their elements, and in nested loops when they broadcast; anything else
    (scalars, 0-d arrays, strided arrays of two or more axes, more axes, other dtypes) as
    np.sum(a * b)."""
    arrays = isinstance(a, numba.types.Array) and isinstance(b, numba.types.Array)
    if not (arrays and a.dtype == numba.types.float64 and b.dtype == numba.types.float64 and
            a.ndim == b.ndim):
        return lambda a, b: np.sum(a * b)
    if a.ndim == 1:
        def sum_of_products_vectors(a, b):
            n = a.shape[0]
            m = b.shape[0]
            total = 0.0
            if n == m:
                for i in range(n):
                    total += a[i] * b[i]
            elif m == 1:
                for i in range(n):
                    total += a[i] * b[0]
            elif n == 1:
                for i in range(m):
                    total += a[0] * b[i]
            else:
                raise ValueError("operands could not be broadcast together")
            return total
        return sum_of_products_vectors
    if a.layout != 'C' or b.layout != 'C' or a.ndim not in (2, 3):
        return lambda a, b: np.sum(a * b)  # (loops over strided views do not vectorize)

    # Broadcasting (an axis of length one against a longer one) in nested loops: an array
    # expression here would take Numba a second or more to compile.
    if a.ndim == 2:
        def sum_of_products_matrices(a, b):
            if a.shape == b.shape:
                return sum_of_products_flat(a, b)
            rows, cols = broadcast_length(a, b, 0), broadcast_length(a, b, 1)
            total = 0.0
            for i in range(rows):
                ia = 0 if a.shape[0] == 1 else i
                ib = 0 if b.shape[0] == 1 else i
                for j in range(cols):
                    total += a[ia, 0 if a.shape[1] == 1 else j] * \\
                        b[ib, 0 if b.shape[1] == 1 else j]
            return total
        return sum_of_products_matrices

    def sum_of_products_cubes(a, b):
        if a.shape == b.shape:
            return sum_of_products_flat(a, b)
        n0, n1 = broadcast_length(a, b, 0), broadcast_length(a, b, 1)
        n2 = broadcast_length(a, b, 2)
        total = 0.0
        for i in range(n0):
            ia = 0 if a.shape[0] == 1 else i
            ib = 0 if b.shape[0] == 1 else i
            for j in range(n1):
                ja = 0 if a.shape[1] == 1 else j
                jb = 0 if b.shape[1] == 1 else j
                for k in range(n2):
                    total += a[ia, ja, 0 if a.shape[2] == 1 else k] * \\
                        b[ib, jb, 0 if b.shape[2] == 1 else k]
        return total
    return sum_of_products_cubes


def sum_of_products_flat(a, b):
    """np.sum(a * b) of two C-contiguous arrays of one shape, in one loop."""
    flat_a = a.reshape(a.size)
    flat_b = b.reshape(b.size)
    total = 0.0
    for i in range(flat_a.size):
        total += flat_a[i] * flat_b[i]
    return total


def broadcast_length(a, b, axis):
    """The length of `axis` when a and b broadcast (ValueError when they do not)."""
    n, m = a.shape[axis], b.shape[axis]
    if n != m and n != 1 and m != 1:
        raise ValueError("operands could not be broadcast together")
    return m if n == 1 else n
'''

# np.sum(a * b, axis=k) under Numba: the product is an array expression written to a temporary
# as large as a and b, then summed in a second pass (ADBench GMM's vectorized gradient,
# sum_axis(z * z, 2) of 25 x 1000 x 10: the temporary and the pass cost 224 us). Two
# C-contiguous float64 arrays of one shape (two or three axes) take one loop nest that
# multiplies and adds; anything else (broadcasting, strided views, other dtypes) is
# sum_axis(a * b, axis) as before.
DIALECT_HELPERS["sum_axis_of_products"] = '''\
def sum_axis_of_products(a, b, axis):
    """np.sum(a * b, axis=axis) for one integer axis (under Numba, two C-contiguous float64
    arrays of one shape and two or three axes take one loop nest, no temporary)."""
    return np.sum(a * b, axis=axis)


@numba.extending.overload(sum_axis_of_products, jit_options={
    'error_model': 'numpy', 'fastmath': {'reassoc', 'contract'}})
def sum_axis_of_products_numba(a, b, axis):
    """How Numba compiles sum_axis_of_products: loops over two C-contiguous float64 arrays of
    one shape and two or three axes; sum_axis(a * b, axis) otherwise (and when the shapes
    differ at run time)."""
    same_kind = isinstance(a, numba.types.Array) and isinstance(b, numba.types.Array) and \\
        a.dtype == numba.types.float64 and b.dtype == numba.types.float64 and \\
        a.ndim == b.ndim and a.ndim in (2, 3) and a.layout == 'C' and b.layout == 'C'
    if not same_kind:
        return lambda a, b, axis: sum_axis(a * b, axis)
    if a.ndim == 2:
        def products_2d(a, b, axis):
            if a.shape != b.shape or not -2 <= axis <= 1:
                return sum_axis(a * b, axis)
            rows, cols = a.shape
            if axis == 1 or axis == -1:
                out = np.empty(rows)
                for i in range(rows):
                    total = 0.0
                    for j in range(cols):
                        total += a[i, j] * b[i, j]
                    out[i] = total
                return out
            out = np.zeros(cols)
            for i in range(rows):
                for j in range(cols):
                    out[j] += a[i, j] * b[i, j]
            return out
        return products_2d

    def products_3d(a, b, axis):
        if a.shape != b.shape or not -3 <= axis <= 2:
            return sum_axis(a * b, axis)
        first, rows, cols = a.shape
        if axis == 2 or axis == -1:
            out = np.empty((first, rows))
            for h in range(first):
                for i in range(rows):
                    total = 0.0
                    for j in range(cols):
                        total += a[h, i, j] * b[h, i, j]
                    out[h, i] = total
            return out
        down = axis == 0 or axis == -3
        out = np.zeros((rows, cols) if down else (first, cols))
        for h in range(first):
            for i in range(rows):
                row = i if down else h
                for j in range(cols):
                    out[row, j] += a[h, i, j] * b[h, i, j]
        return out
    return products_3d
'''

# np.sum(x, axis=k) of a 2-D float array under Numba: Numba's own axis sum takes ~1 s to
# compile the first time and, along the last axis, runs ~8x slower than NumPy (1024 x 128:
# 269 us, NumPy 31 us); these loops compile in ~0.2 s and run 8-10 us (axis 0 adds whole rows,
# axis 1 sums each row in SIMD lanes).
DIALECT_HELPERS["sum_axis"] = '''\
def sum_axis(x, axis):
    """np.sum(x, axis=axis) for one integer axis (under Numba, 2-D and 3-D float arrays and
    2-D booleans take loops)."""
    return np.sum(x, axis=axis)


@numba.extending.overload(sum_axis, jit_options={'error_model': 'numpy', 'fastmath': {'reassoc'}})
def sum_axis_numba(x, axis):
    """How Numba compiles sum_axis: a 2-D or 3-D float32/float64 array in loops, summed in
    float64, and a 2-D boolean array counted; anything else as np.sum(x, axis=axis).
    (Numba's np.sum with an axis compiles the message of its axis error: 1.5 s of ADBench
    GMM's vectorized gradient for its first such sum; these loops 0.25-0.4 s each.)"""
    if isinstance(x, numba.types.Array) and x.ndim == 2 and x.dtype == numba.types.boolean:
        def count_axis(x, axis):  # (NumPy counts booleans in int64)
            if axis != 0 and axis != 1 and axis != -1 and axis != -2:
                raise ValueError("axis out of bounds for an array of dimension 2")
            down = axis == 0 or axis == -2  # a count per column
            rows, cols = x.shape
            out = np.zeros(cols if down else rows, dtype=np.int64)
            for i in range(rows):
                for j in range(cols):
                    if x[i, j]:
                        out[j if down else i] += 1
            return out
        return count_axis
    if not (isinstance(x, numba.types.Array) and x.ndim in (2, 3) and
            x.dtype in (numba.types.float64, numba.types.float32)):
        return lambda x, axis: np.sum(x, axis=axis)

    def sum_axis_3d(x, axis):
        first, rows, cols = x.shape
        if axis == 2 or axis == -1:
            out = np.empty((first, rows), dtype=x.dtype)
            for h in range(first):
                for i in range(rows):
                    total = 0.0
                    for j in range(cols):
                        total += x[h, i, j]
                    out[h, i] = total
            return out
        if axis != 0 and axis != 1 and axis != -2 and axis != -3:
            raise ValueError("axis out of bounds for an array of dimension 3")
        down = axis == 0 or axis == -3  # the first axis summed: out's rows are x's rows
        out = np.zeros((rows if down else first, cols), dtype=x.dtype)
        for h in range(first):
            for i in range(rows):
                row = i if down else h
                for j in range(cols):
                    out[row, j] += x[h, i, j]
        return out
    if x.ndim == 3:
        return sum_axis_3d

    def sum_axis_loops(x, axis):
        rows, cols = x.shape
        if axis == 0 or axis == -2:
            out = np.zeros(cols, dtype=x.dtype)
            for i in range(rows):
                for j in range(cols):
                    out[j] += x[i, j]
            return out
        if axis != 1 and axis != -1:
            raise ValueError("axis out of bounds for an array of dimension 2")
        out = np.empty(rows, dtype=x.dtype)
        for i in range(rows):
            total = 0.0
            for j in range(cols):
                total += x[i, j]
            out[i] = total
        return out
    return sum_axis_loops
'''

# np.dot(a, b) / a @ b of small float64 operands under Numba: Numba calls BLAS (through
# SciPy) even for a 10 x 10 matrix times a vector, ~150 ns a call where loops take ~70 ns;
# ADBench's GMM makes 50,000 such products per gradient (19.6 -> 15 ms with the loops).
DIALECT_HELPERS["small_dot"] = '''\
def small_dot(a, b):
    """np.dot(a, b) (under Numba, small float64 matrix-vector and vector products run as
    loops instead of a BLAS call)."""
    return np.dot(a, b)


@numba.extending.overload(small_dot, jit_options={'error_model': 'numpy',
                                                  'fastmath': {'reassoc', 'contract'}})
def small_dot_numba(a, b):
    """How Numba compiles small_dot: a float64 matrix times a vector, a vector times a matrix
    or two vectors, with at most 4096 matrix entries, in loops; anything else (larger
    operands, matrix products, other dtypes and ranks) as np.dot (dot_of_any_dtype)."""
    if not (isinstance(a, numba.types.Array) and isinstance(b, numba.types.Array) and
            a.dtype == numba.types.float64 and b.dtype == numba.types.float64):
        return lambda a, b: dot_of_any_dtype(a, b)
    if a.ndim == 2 and b.ndim == 1:
        def matrix_vector(a, b):
            rows, cols = a.shape
            if rows * cols > 4096 or cols != b.shape[0]:
                return np.dot(a, b)
            out = np.empty(rows)
            for i in range(rows):
                total = 0.0
                for j in range(cols):
                    total += a[i, j] * b[j]
                out[i] = total
            return out
        return matrix_vector
    if a.ndim == 1 and b.ndim == 2:
        def vector_matrix(a, b):
            rows, cols = b.shape
            if rows * cols > 4096 or rows != a.shape[0]:
                return np.dot(a, b)
            out = np.zeros(cols)
            for i in range(rows):
                for j in range(cols):
                    out[j] += a[i] * b[i, j]
            return out
        return vector_matrix
    if a.ndim == 1 and b.ndim == 1:
        def vector_vector(a, b):
            if a.shape[0] > 4096 or a.shape[0] != b.shape[0]:
                return np.dot(a, b)
            total = 0.0
            for i in range(a.shape[0]):
                total += a[i] * b[i]
            return total
        return vector_vector
    return lambda a, b: np.dot(a, b)
'''

# Numba's np.dot and @ take two arrays of one float or complex dtype: an integer matrix (a
# graph's adjacency, a design matrix of counts) times a float vector is a TypingError there.
DIALECT_HELPERS["dot_of_any_dtype"] = '''\
def dot_of_any_dtype(a, b):
    """np.dot(a, b) (under Numba, operands of other dtypes are converted first)."""
    return np.dot(a, b)
'''
OVERLOAD_FORMS = {}
OVERLOAD_FORMS["dot_of_any_dtype"] = DIALECT_HELPERS["dot_of_any_dtype"] + '''

@numba.extending.overload(dot_of_any_dtype, jit_options={'error_model': 'numpy'})
def dot_of_any_dtype_numba(a, b):
    """How Numba compiles dot_of_any_dtype: two arrays of one float or complex dtype with
    np.dot; otherwise both are converted to the dtype NumPy's product has (integer and boolean
    operands multiplied as float64, an integer product rounded back, exact below 2**53)."""
    if not (isinstance(a, numba.types.Array) and isinstance(b, numba.types.Array)) or \\
            (a.dtype == b.dtype and isinstance(a.dtype, (numba.types.Float,
                                                         numba.types.Complex))):
        return lambda a, b: np.dot(a, b)
    result = np.result_type(numba.np.numpy_support.as_dtype(a.dtype),
                            numba.np.numpy_support.as_dtype(b.dtype))
    work = result if result.kind in "fc" else np.dtype(np.float64)

    def converted(a, b):
        return np.dot(a.astype(work), b.astype(work)).astype(result)
    return converted
'''

# A new small array per loop step costs an allocation and a free (~45 ns each under Numba);
# codegen/buffer_reuse.py writes `x = np.zeros_like(y)` in a loop as `x = zeros_like_reusing(x,
# y)` where nothing but x can see x's old array and x's rank is not known (a known vector is
# zeroed in place by statements written out, not by this helper). Numba types a helper's two
# returns as one type, so the overload reuses only a buffer of the very type the allocation
# would make.
DIALECT_HELPERS["zeros_like_reusing"] = '''\
def zeros_like_reusing(buffer, like):
    """np.zeros_like(like), written into `buffer` when it is a vector of like's length and
    dtype (the caller hands over an array nothing else refers to)."""
    if isinstance(buffer, np.ndarray) and isinstance(like, np.ndarray) and \\
            buffer.shape == like.shape == (like.size,) and buffer.dtype == like.dtype:
        buffer[:] = 0
        return buffer
    return np.zeros_like(like)


@numba.extending.overload(zeros_like_reusing, jit_options={'error_model': 'numpy'})
def zeros_like_reusing_numba(buffer, like):
    """How Numba compiles zeros_like_reusing: a C-contiguous vector of like's dtype and length
    is zeroed and returned; anything else gets np.zeros_like(like)."""
    if not (isinstance(buffer, numba.types.Array) and isinstance(like, numba.types.Array) and
            buffer.ndim == 1 and like.ndim == 1 and buffer.dtype == like.dtype and
            buffer.layout == 'C'):
        return lambda buffer, like: np.zeros_like(like)

    def reuse(buffer, like):
        if buffer.shape[0] == like.shape[0]:
            buffer[:] = 0
            return buffer
        return np.zeros_like(like)
    return reuse
'''

#: The Numba form of helpers that a module written for Numba's overloads (numba_overloads=True)
#: takes instead of DIALECT_HELPERS's: a plain function and an overload written into the caller
#: (``inline='always'``), where a call in an inner loop kept LLVM from optimizing the loop
#: (ADBench GMM's gradient: 4.7 -> 3.2 ms, compile +0.6 s).
OVERLOAD_FORMS["add_at"] = '''\
def add_at(a, i, v):
    """`a[i] += v` for one integer `i`: a row added in place when `a` has two or more axes."""
    a[i] += v


@numba.extending.overload(add_at, inline='always', jit_options={'error_model': 'numpy'})
def add_at_numba(a, i, v):
    """How Numba compiles add_at: written into the caller (a call in an inner loop kept LLVM
    from optimizing it: ADBench GMM's gradient 4.7 -> 3.2 ms), as the element update for a
    vector and as an in-place add on the row otherwise."""
    if isinstance(a, numba.types.Array) and a.ndim == 1:
        def element(a, i, v):
            a[i] += v
        return element

    def row_update(a, i, v):
        row = a[i]
        row += v
    return row_update
'''

OVERLOAD_FORMS["index_array"] = DIALECT_HELPERS["index_array"] + '''

@numba.extending.overload(index_array, inline='always')
def index_array_numba(a):
    """How Numba compiles index_array: a 1-D boolean mask as np.nonzero(a)[0] (Numba checks
    a mask's own length against the other index arrays), anything else as it is."""
    if isinstance(a, numba.types.Array) and a.ndim == 1 and \\
            isinstance(a.dtype, numba.types.Boolean):
        return lambda a: np.nonzero(a)[0]
    return lambda a: a
'''

OVERLOAD_FORMS["full_like_any"] = DIALECT_HELPERS["full_like_any"] + '''

@numba.extending.overload(full_like_any, inline='always')
def full_like_any_numba(a, v):
    """How Numba compiles full_like_any: an array fill value broadcast onto zeros of a's shape
    (Numba's np.full_like takes a number only), a number as np.full_like."""
    if isinstance(v, numba.types.Array):
        return lambda a, v: np.zeros_like(a) + v
    return lambda a, v: np.full_like(a, v)
'''

OVERLOAD_FORMS["mask_read"] = DIALECT_HELPERS["mask_read"] + '''

@numba.extending.overload(mask_read, jit_options={'error_model': 'numpy'})
def mask_read_numba(a, mask):
    """How Numba compiles mask_read: a mask of two or more axes (Numba's getitem fails on one
    with an AssertionError) as a count of its True entries, then a loop copying them (over
    flat views when both arrays are C-contiguous, np.ndindex otherwise); a[mask] else."""
    if not (isinstance(a, numba.types.Array) and isinstance(mask, numba.types.Array) and
            mask.ndim > 1 and isinstance(mask.dtype, numba.types.Boolean)):
        return lambda a, mask: a[mask]
    flat = a.layout == "C" and mask.layout == "C"

    def gather(a, mask):
        if a.shape != mask.shape:
            raise IndexError("boolean index did not match indexed array")
        out = np.empty(np.count_nonzero(mask), dtype=a.dtype)
        k = 0
        if flat:
            values, chosen = a.reshape(-1), mask.reshape(-1)
            for i in range(chosen.shape[0]):
                if chosen[i]:
                    out[k] = values[i]
                    k += 1
        else:
            for index in np.ndindex(mask.shape):
                if mask[index]:
                    out[k] = a[index]
                    k += 1
        return out
    return gather
'''

OVERLOAD_FORMS["mask_store"] = DIALECT_HELPERS["mask_store"] + '''

@numba.extending.overload(mask_store, jit_options={'error_model': 'numpy'})
def mask_store_numba(a, mask, v):
    """How Numba compiles mask_store: a mask of two or more axes (Numba's setitem fails on one
    with an AssertionError) as a loop over the entries, setting each True one to v (a
    number) or to v's next value (a vector); a[mask] = v else."""
    if not (isinstance(a, numba.types.Array) and isinstance(mask, numba.types.Array) and
            mask.ndim > 1 and isinstance(mask.dtype, numba.types.Boolean)):
        def plain(a, mask, v):
            a[mask] = v
        return plain
    flat = a.layout == "C" and mask.layout == "C"
    if isinstance(v, numba.types.Array):
        def scatter_values(a, mask, v):
            if a.shape != mask.shape:
                raise IndexError("boolean index did not match indexed array")
            given = v.ravel()
            one = given.shape[0] == 1  # (broadcast, as NumPy does)
            if not one and given.shape[0] != np.count_nonzero(mask):
                raise ValueError("NumPy boolean array indexing assignment cannot assign the "
                                 "values to the True entries: their counts differ")
            k = 0
            if flat:
                values, chosen = a.reshape(-1), mask.reshape(-1)
                for i in range(chosen.shape[0]):
                    if chosen[i]:
                        values[i] = given[0 if one else k]
                        k += 1
            else:
                for index in np.ndindex(mask.shape):
                    if mask[index]:
                        a[index] = given[0 if one else k]
                        k += 1
        return scatter_values

    def scatter_number(a, mask, v):
        if a.shape != mask.shape:
            raise IndexError("boolean index did not match indexed array")
        if flat:
            values, chosen = a.reshape(-1), mask.reshape(-1)
            for i in range(chosen.shape[0]):
                if chosen[i]:
                    values[i] = v
        else:
            for index in np.ndindex(mask.shape):
                if mask[index]:
                    a[index] = v
    return scatter_number
'''

OVERLOAD_FORMS["subtract_at"] = '''\
def subtract_at(a, i, v):
    """`a[i] -= v` for one integer `i`: a row subtracted in place when `a` has two or more
    axes (what `add_at(a, i, -v)` adds, without the negated copy)."""
    a[i] -= v


@numba.extending.overload(subtract_at, inline='always', jit_options={'error_model': 'numpy'})
def subtract_at_numba(a, i, v):
    """How Numba compiles subtract_at: written into the caller, as add_at is."""
    if isinstance(a, numba.types.Array) and a.ndim == 1:
        def element(a, i, v):
            a[i] -= v
        return element

    def row_update(a, i, v):
        row = a[i]
        row -= v
    return row_update
'''

def _whole_extreme(kind, compare):
    """The plain and the Numba form of whole_max / whole_min: np.max(a) / np.min(a) of a whole
    array (or a number). Numba's own walks np.nditer and takes 0-d items, which took ~0.5 s to
    compile per array type (twice in ADBench GMM's gradient); a float vector of any layout, or
    a C-contiguous array seen flat, is read in one loop instead, NaN returned as NumPy does."""
    return f'''\\
def whole_{kind}(a):
    """np.{kind}(a) of a whole array (or a number)."""
    return np.{kind}(a)


@numba.extending.overload(whole_{kind}, jit_options={{'error_model': 'numpy'}})
def whole_{kind}_numba(a):
    """How Numba compiles whole_{kind}: a float array read in one loop (a vector of any
    layout, a C-contiguous array flat); anything else np.{kind}."""
    if not (isinstance(a, numba.types.Array) and isinstance(a.dtype, numba.types.Float) and
            (a.ndim == 1 or a.layout == 'C')):
        return lambda a: np.{kind}(a)
    vector = a.ndim == 1

    def loop_{kind}(a):
        flat = a if vector else a.reshape(a.size)
        if flat.shape[0] == 0:
            raise ValueError("zero-size array to reduction operation {kind}imum which has "
                             "no identity")
        best = flat[0]
        for i in range(1, flat.shape[0]):
            v = flat[i]
            if v {compare} best:
                best = v
            elif v != v:
                return v
        return best
    return loop_{kind}
'''


OVERLOAD_FORMS["whole_max"] = _whole_extreme("max", ">")
OVERLOAD_FORMS["whole_min"] = _whole_extreme("min", "<")
DIALECT_HELPERS["whole_max"] = '''\\
def whole_max(a):
    """np.max(a) of a whole array (or a number)."""
    return np.max(a)
'''
DIALECT_HELPERS["whole_min"] = '''\\
def whole_min(a):
    """np.min(a) of a whole array (or a number)."""
    return np.min(a)
'''


DIALECT_HELPERS["norm_any_rank"] = '''\
def norm_any_rank(x):
    """np.linalg.norm(x): the 2-norm of a vector, the Frobenius norm of any other array."""
    return np.linalg.norm(x)
'''
OVERLOAD_FORMS["norm_any_rank"] = DIALECT_HELPERS["norm_any_rank"] + '''

@numba.extending.overload(norm_any_rank, jit_options={'error_model': 'numpy'})
def norm_any_rank_numba(x):
    """How Numba compiles norm_any_rank: Numba's norm for a vector or a matrix; for more
    axes (which it refuses) the square root of the sum of squares, as NumPy computes it."""
    if isinstance(x, numba.types.Array) and x.ndim > 2:
        def flat(x):
            total = 0.0
            for v in np.ravel(x):
                total += v * v
            return np.sqrt(total)
        return flat
    return lambda x: np.linalg.norm(x)
'''
# Numba's np.linalg.solve takes one matrix and a vector or a matrix; batched code (jacfwd's
# tangent directions, vmap of a solve against one matrix) solves stacks.
DIALECT_HELPERS["solve_stacks"] = '''\
def solve_stacks(a, b):
    """np.linalg.solve(a, b) (under Numba, stacks of matrices too)."""
    return np.linalg.solve(a, b)
'''
OVERLOAD_FORMS["solve_stacks"] = DIALECT_HELPERS["solve_stacks"] + '''

@numba.extending.overload(solve_stacks, jit_options={'error_model': 'numpy'})
def solve_stacks_numba(a, b):
    """How Numba compiles solve_stacks: Numba's solve for a matrix against a vector or a
    matrix; one matrix against a stack (k, n, m) as one solve with the k * m columns side by
    side (one factorization); a stack against a stack of one length, matrix by matrix."""
    if not (isinstance(a, numba.types.Array) and isinstance(b, numba.types.Array)):
        return lambda a, b: np.linalg.solve(a, b)
    if a.ndim == 2 and b.ndim == 3:
        def one_matrix(a, b):
            k, n, m = b.shape
            columns = np.empty((n, k * m), dtype=b.dtype)
            for p in range(k):
                columns[:, p * m:(p + 1) * m] = b[p]
            x = np.linalg.solve(a, columns)
            out = np.empty((k, n, m), dtype=x.dtype)
            for p in range(k):
                out[p] = x[:, p * m:(p + 1) * m]
            return out
        return one_matrix
    if a.ndim == 3 and b.ndim in (2, 3):
        def matrix_by_matrix(a, b):
            first = np.linalg.solve(np.ascontiguousarray(a[0]), np.ascontiguousarray(
                b[0] if b.ndim == 3 else b))
            out = np.empty((a.shape[0],) + first.shape, dtype=first.dtype)
            for p in range(a.shape[0]):
                out[p] = np.linalg.solve(np.ascontiguousarray(a[p]), np.ascontiguousarray(
                    b[p if b.shape[0] > 1 else 0] if b.ndim == 3 else b))
            return out
        return matrix_by_matrix
    return lambda a, b: np.linalg.solve(a, b)
'''


DIALECT_HELPERS["inner_product"] = '''\
def inner_product(a, b):
    """np.inner(a, b): the sums over the last axes of a and b."""
    return np.inner(a, b)
'''
OVERLOAD_FORMS["inner_product"] = DIALECT_HELPERS["inner_product"] + '''

@numba.extending.overload(inner_product, jit_options={'error_model': 'numpy'})
def inner_product_numba(a, b):
    """How Numba compiles inner_product (Numba has no np.inner): for vectors and matrices,
    np.dot with b's last axis first (inner(A, B) = A B^T, inner(a, B) = B a); a number
    multiplies; other ranks are refused."""
    ranks = tuple(t.ndim if isinstance(t, numba.types.Array) else 0 for t in (a, b))
    if 0 in ranks:
        return lambda a, b: a * b
    if ranks == (1, 2):
        return lambda a, b: np.dot(b, a)
    if ranks == (2, 2):
        return lambda a, b: np.dot(a, np.ascontiguousarray(b.T))
    if max(ranks) <= 2:
        return lambda a, b: np.dot(a, b)
    raise numba.core.errors.TypingError("np.inner of arrays of more than two axes is not "
                                        "compiled")
'''
DIALECT_HELPERS["squeeze_none"] = '''\
def squeeze_none(a):
    """np.squeeze(a) of an array none of whose axes the code knew to have size one."""
    return np.squeeze(a)
'''
OVERLOAD_FORMS["squeeze_none"] = DIALECT_HELPERS["squeeze_none"] + '''

@numba.extending.overload(squeeze_none, jit_options={'error_model': 'numpy'})
def squeeze_none_numba(a):
    """How Numba compiles squeeze_none: `a` itself, after checking that no axis has size
    one (NumPy would drop it, and compiled code keeps one rank: a ValueError says to name
    the axes, np.squeeze(x, axis=...)); a number is returned as it is."""
    if not isinstance(a, numba.types.Array):
        return lambda a: a

    def checked(a):
        for k in range(a.ndim):
            if a.shape[k] == 1:
                raise ValueError("np.squeeze(x) under jit: x has an axis of size one the "
                                 "generated code did not expect (compiled code keeps one "
                                 "rank); name the axes to drop, np.squeeze(x, axis=...)")
        return a
    return checked
'''


OVERLOAD_FORMS["stack_list"] = '''\
def stack_list(arrays):
    """np.stack(arrays) for a list of arrays of one shape, or of numbers (along a new first
    axis)."""
    return np.stack(arrays)


@numba.extending.overload(stack_list, jit_options={'error_model': 'numpy'})
def stack_list_numba(arrays):
    """How Numba compiles stack_list, chosen by the list's element type: arrays are copied
    element by element (np.ndindex: any layout), numbers one by one into an array of their
    dtype. (The one generic form, np.asarray and np.ravel of every element, took 1.2 and
    0.6 s to compile for ADBench GMM's two lists; np.nditer 1.3 s for both, np.ndindex
    0.4-0.8 s; `out[i] = part` 7 s for a list of matrices.)"""
    item = arrays.dtype
    if isinstance(item, numba.types.Array):
        def stack_arrays(arrays):
            first = arrays[0]
            out = np.empty((len(arrays),) + first.shape, dtype=first.dtype)
            for i in range(len(arrays)):
                part = arrays[i]
                if part.shape != first.shape:
                    raise ValueError("all input arrays must have the same shape")
                for index in np.ndindex(first.shape):
                    out[(i,) + index] = part[index]
            return out
        return stack_arrays
    if isinstance(item, (numba.types.Float, numba.types.Integer, numba.types.Boolean)):
        kind = numba.np.numpy_support.as_dtype(item)

        def stack_numbers(arrays):
            out = np.empty(len(arrays), dtype=kind)
            for i in range(len(arrays)):
                out[i] = arrays[i]
            return out
        return stack_numbers
    return None
'''


OVERLOAD_FORMS["message_text"] = '''\
def message_text(v):
    """str(v), for an exception's message."""
    return str(v)


@numba.extending.overload(message_text)
def message_text_numba(v):
    """How Numba writes a value into a message (its own str() of a float, a tuple or an
    array names the type only): integers, booleans and strings as str() does, floats with
    six significant digits, tuples of integers as (2, 3), arrays by dtype and shape."""
    @numba.njit
    def digits(a):
        # a > 0 finite: six significant digits, as '%g' writes them
        e = int(np.floor(np.log10(a)))
        m = int(np.round(a / 10.0 ** (e - 5)))
        if m >= 1000000:
            m, e = m // 10, e + 1
        text = str(m)
        while len(text) > 1 and text[-1] == "0":
            text = text[:-1]
        if -5 <= e < 6:
            if e < 0:
                return "0." + "0" * (-e - 1) + text
            if len(text) <= e + 1:
                return text + "0" * (e + 1 - len(text)) + ".0"
            return text[:e + 1] + "." + text[e + 1:]
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return mantissa + ("e-" if e < 0 else "e+") + ("0" if abs(e) < 10 else "") + str(abs(e))

    @numba.njit
    def float_text(v):
        if v != v:
            return "nan"
        if v == 0:
            return "0.0"
        a = abs(v)
        sign = "-" if v < 0 else ""
        if a == np.inf:
            return sign + "inf"
        return sign + digits(a)

    @numba.njit
    def shape_text(shape):
        text = "("
        for i in range(len(shape)):
            text += str(shape[i]) + (", " if i < len(shape) - 1 else "")
        return text + ("," if len(shape) == 1 else "") + ")"

    if isinstance(v, numba.types.Float):
        return lambda v: float_text(v)
    if isinstance(v, numba.types.UniTuple) and isinstance(v.dtype, numba.types.Integer):
        return lambda v: shape_text(v)
    if isinstance(v, numba.types.Array):
        what = "array of " + str(v.dtype) + ", shape "
        return lambda v: what + shape_text(v.shape)
    if isinstance(v, (numba.types.Integer, numba.types.Boolean, numba.types.UnicodeType,
                      numba.types.StringLiteral)):
        return lambda v: str(v)
    return None
'''
OVERLOAD_FORMS["message_format"] = '''\
def message_format(v, spec):
    \"\"\"format(v, spec), for an exception's message or a print.\"\"\"
    return format(v, spec)



@numba.njit
def _format_times_small(limbs, used, factor):
    # limbs[:used] * factor (factor <= 10**9), in place; the new count of limbs
    carry = 0
    for i in range(used):
        cur = limbs[i] * factor + carry
        limbs[i] = cur % 1000000000
        carry = cur // 1000000000
    while carry > 0:
        limbs[used] = carry % 1000000000
        carry //= 1000000000
        used += 1
    return used


@numba.njit
def _format_divide_small(limbs, used, divisor):
    # limbs[:used] // divisor (divisor <= 10**9), in place; whether a remainder was left
    rest = 0
    for i in range(used - 1, -1, -1):
        cur = rest * 1000000000 + limbs[i]
        limbs[i] = cur // divisor
        rest = cur % divisor
    return rest != 0


@numba.njit
def _format_binary_parts(a):
    # (m, e) with a == m * 2**e exactly, m an integer below 2**53 (a >= 0, finite)
    if a == 0.0:
        return 0, 0
    e = max(int(np.floor(np.log2(a))) - 52, -1074)
    while _format_unscaled(a, e) >= 9007199254740992.0:
        e += 1
    while e > -1074 and _format_unscaled(a, e) < 4503599627370496.0:
        e -= 1
    return int(_format_unscaled(a, e)), e


@numba.njit
def _format_unscaled(a, e):
    # a / 2**e, exact (2.0 ** e itself is not below 2**-1000)
    if e < -1000:
        return (a * 2.0 ** 200) / 2.0 ** (e + 200)
    return a / 2.0 ** e


@numba.njit
def _format_exact_digits(a, k):
    # round(a * 10**k) (half to even) in decimal digits, a >= 0 finite, k any integer
    m, e = _format_binary_parts(a)  # a == m * 2**e exactly
    size = (40 + max(e, 0) * 30103 // 100000 + max(k, 0)) // 9 + 4
    limbs = np.zeros(size, dtype=np.int64)
    limbs[0], used = m % 1000000000, 1
    rest_of_m = m // 1000000000
    while rest_of_m > 0:
        limbs[used] = rest_of_m % 1000000000
        rest_of_m //= 1000000000
        used += 1
    used = _format_times_small(limbs, used, 2)  # 2 * a * 10**k: its last bit is "half or more"
    for _ in range(max(k, 0) // 9):
        used = _format_times_small(limbs, used, 1000000000)
    used = _format_times_small(limbs, used, 10 ** (max(k, 0) % 9))
    for _ in range(max(e, 0) // 29):
        used = _format_times_small(limbs, used, 536870912)
    used = _format_times_small(limbs, used, 2 ** (max(e, 0) % 29))
    inexact = False
    for _ in range(max(-e, 0) // 29):
        inexact |= _format_divide_small(limbs, used, 536870912)
    inexact |= _format_divide_small(limbs, used, 2 ** (max(-e, 0) % 29))
    for _ in range(max(-k, 0) // 9):
        inexact |= _format_divide_small(limbs, used, 1000000000)
    inexact |= _format_divide_small(limbs, used, 10 ** (max(-k, 0) % 9))
    half = limbs[0] % 2 == 1
    _format_divide_small(limbs, used, 2)
    if half and (inexact or limbs[0] % 2 == 1):  # above the half, or a tie to even
        i = 0
        limbs[0] += 1
        while limbs[i] == 1000000000:
            limbs[i] = 0
            limbs[i + 1] += 1
            i += 1
        used = max(used, i + 1)
    while used > 1 and limbs[used - 1] == 0:
        used -= 1
    out = str(limbs[used - 1])
    for i in range(used - 2, -1, -1):
        piece = str(limbs[i])
        out += "0" * (9 - len(piece)) + piece
    return out


@numba.njit
def _format_split(a, p):
    # a > 0, finite: (p + 1 significant digits, decimal exponent)
    e = int(np.floor(np.log10(a)))
    digits = _format_exact_digits(a, p - e)
    if len(digits) < p + 1:
        e -= 1
        digits = _format_exact_digits(a, p - e)
    if len(digits) > p + 1:
        e += 1
        digits = _format_exact_digits(a, p - e)
    return digits, e


@numba.njit
def _format_all_zeros(text):
    for c in text:
        if c in "123456789":
            return False
    return True


@numba.njit
def _format_fixed(a, p, alternate):
    # a >= 0, finite: p digits after the point
    digits = _format_exact_digits(a, p)
    if p == 0:
        return digits + ("." if alternate else "")
    if len(digits) <= p:
        digits = "0" * (p + 1 - len(digits)) + digits
    return digits[:len(digits) - p] + "." + digits[len(digits) - p:]


@numba.njit
def _format_scientific(a, p, alternate):
    if a == 0.0:
        digits, e = "0" * (p + 1), 0
    else:
        digits, e = _format_split(a, p)
    mantissa = digits[0] + ("." + digits[1:] if p > 0 or alternate else "")
    return mantissa + ("e-" if e < 0 else "e+") + ("0" if abs(e) < 10 else "") + str(abs(e))


@numba.njit
def _format_trimmed(text, alternate):
    # trailing zeros after the point dropped, and the point if nothing follows it
    if alternate or "." not in text:
        return text
    while text[-1] == "0":
        text = text[:-1]
    return text[:-1] if text[-1] == "." else text


@numba.njit
def _format_general(a, p, point, alternate):
    p = max(p, 1)
    e = 0 if a == 0.0 else _format_split(a, p - 1)[1]
    if -4 <= e < (p - 1 if point else p):  # (no type: scientific from p - 1 on)
        out = _format_trimmed(_format_fixed(a, p - 1 - e, alternate), alternate)
        if point and "." not in out:
            out = out + ".0"
        return out
    out = _format_scientific(a, p - 1, alternate)
    cut = out.index("e")
    return _format_trimmed(out[:cut], alternate) + out[cut:]


@numba.njit
def _format_float_digits(a, kind, p, alternate):
    # a >= 0, finite (multiplied by 100 already for %)
    if kind == "f":
        return _format_fixed(a, p, alternate)
    if kind == "%":
        return _format_fixed(a, p, alternate) + "%"
    if kind == "e":
        return _format_scientific(a, p, alternate)
    if kind == "g":
        return _format_general(a, p, False, alternate)
    if p >= 0:  # no type, a precision: as g, with a digit after the point
        return _format_general(a, p, True, alternate)
    return message_text(a)


@numba.njit
def _format_in_base(n, base, upper):
    # n >= 0 in base 2, 8, 10 or 16
    if base == 10:
        return str(n)
    symbols = "0123456789ABCDEF" if upper else "0123456789abcdef"
    out = ""
    while True:
        out = symbols[n % base] + out
        n //= base
        if n == 0:
            return out


@numba.njit
def _format_grouped(digits, least, separator, size):
    # digits with a separator every `size` from the right, zero-padded on the left to at
    # least `least` characters (as Python pads a grouped number with zeros)
    out = ""
    count = 0
    i = len(digits)
    while i > 0 or len(out) < least:
        if count == size:  # (then a digit: never a separator first)
            out = separator + out
            count = 0
        out = (digits[i - 1] if i > 0 else "0") + out
        i -= 1
        count += 1
    return out


@numba.njit
def _format_padded(sign_text, prefix, text, width, fill, align, separator, base):
    # sign, prefix (0x) and text, grouped and padded to width as the spec says
    if separator != "":
        end = 0
        digit_symbols = "0123456789" if base == 10 else "0123456789abcdefABCDEF"
        while end < len(text) and text[end] in digit_symbols:
            end += 1
        if end > 0:  # (inf, nan: no digits to group)
            least = width - len(sign_text) - len(prefix) - (len(text) - end) \
                if align == "=" and fill == "0" else 0
            text = _format_grouped(text[:end], least, separator,
                                   3 if base == 10 else 4) + text[end:]
    out = sign_text + prefix + text
    missing = width - len(out)
    if missing <= 0:
        return out
    if align == "=":
        return sign_text + prefix + fill * missing + text
    if align == "<":
        return out + fill * missing
    if align == "^":
        return fill * (missing // 2) + out + fill * (missing - missing // 2)
    return fill * missing + out


@numba.njit
def _format_case(text, upper):
    return text.upper() if upper else text


@numba.njit
def _format_float_sign(x, text, sign, no_minus_zero):
    # the sign written before float x's text (z: none for a zero after rounding)
    negative = x < 0 or (x == 0 and np.signbit(x))
    if no_minus_zero and negative and x - x == 0.0 and _format_all_zeros(text.split("e")[0]):
        negative = False
    return _format_sign(negative, sign)


@numba.njit
def _format_sign(negative, sign):
    if negative:
        return "-"
    return sign if sign in "+ " else ""


@numba.extending.overload(message_format)
def message_format_numba(v, spec):
    \"\"\"How Numba writes format(v, spec) (Numba has no format()): the spec, a constant, is
    read while compiling; fill, alignment (< > ^ =), sign, z, #, zero padding, width,
    grouping (, _), precision and the types f F e E g G % d n b o x X c s (and none) are
    applied as Python applies them, the digits exact (decimal digits of the binary value,
    rounded half to even, worked out in base-10**9 limbs). A float with no type and no
    precision is written as message_text writes it (six significant digits, where Python
    writes the shortest repr). A spec Python would refuse is not compiled. The work is done
    by the _format_ functions above, compiled once for every spec.\"\"\"
    import re
    text = getattr(spec, "literal_value", None)
    if not isinstance(text, str):
        return None
    if text == "":
        return lambda v, spec: message_text(v)  # (format(True, "") is "True", as str writes)
    parts = re.fullmatch(r"(?:(.)?([<>=^]))?([-+ ])?(z)?(#)?(0)?(\\d+)?([,_])?(?:\\.(\\d+))?"
                         r"([bcdeEfFgGnosxX%]?)", text)
    is_float = isinstance(v, numba.types.Float)
    is_int = isinstance(v, (numba.types.Integer, numba.types.Boolean))
    is_text = isinstance(v, (numba.types.UnicodeType, numba.types.StringLiteral))
    if parts is None or not (is_float or is_int or is_text):
        return None
    fill, align, sign, no_minus_zero, alternate, zero, width, grouping, precision, kind = \
        parts.groups()
    number = is_float or is_int
    if kind == "n":
        if grouping:
            return None  # (Python: cannot specify ',' with 'n')
        kind = "g" if is_float else "d"
    if zero and not align:
        fill, align = "0", "="  # 08.3f: zeros after the sign
    fill = fill or " "
    align = align or (">" if number else "<")
    width = int(width or 0)
    sign = sign or "-"
    upper = kind in ("F", "E", "G", "X")
    kind = kind.lower() if kind != "X" else "x"
    base = {"b": 2, "o": 8, "x": 16}.get(kind, 10)
    as_float = kind in ("f", "e", "g", "%") or (kind == "" and is_float)
    if is_text and (kind not in ("", "s") or sign != "-" or alternate or grouping or
                    align == "=" or no_minus_zero) or \
            number and kind == "s" or \
            is_float and kind in ("d", "b", "o", "x", "c") or \
            kind == "c" and (sign != "-" or alternate or grouping or precision is not None) or \
            precision is not None and is_int and not as_float or \
            grouping == "," and base != 10 or no_minus_zero and not as_float:
        return None  # (Python raises ValueError for these)
    p = int(precision) if precision is not None else (6 if kind in ("f", "e", "g", "%")
                                                      else -1)
    prefix = ("0" + ("X" if upper else kind)) if alternate and base != 10 else ""
    alternate = bool(alternate)
    no_minus_zero = bool(no_minus_zero)
    separator = grouping or ""
    scale = 100.0 if kind == "%" else 1.0
    suffix = "%" if kind == "%" else ""

    # The spec's fields reach the shared functions as run-time values (p + 0 is an int64, a
    # constant p a Literal[int]): compiled once, not again for every spec's constants.
    if as_float:
        def float_format(v, spec):
            x = float(v) * scale  # (% multiplies first, as Python does: 1e308 is inf%)
            if x != x:
                text = "nan" + suffix
            elif x == np.inf or x == -np.inf:
                text = "inf" + suffix
            else:
                text = _format_float_digits(abs(x), kind + "", p + 0, alternate == True)
            return _format_padded(_format_float_sign(x, text, sign + "", no_minus_zero == True),
                                  prefix + "", _format_case(text, upper == True), width + 0,
                                  fill + "", align + "", separator + "", base + 0)
        return float_format
    if is_int and kind == "c":
        def char_format(v, spec):
            return _format_padded("", "", chr(int(v)), width + 0, fill + "", align + "", "", 10)
        return char_format
    if is_int:
        def int_format(v, spec):
            n = int(v)
            return _format_padded(_format_sign(n < 0, sign + ""), prefix + "",
                                  _format_in_base(abs(n), base + 0, upper == True),
                                  width + 0, fill + "", align + "", separator + "", base + 0)
        return int_format

    def text_format(v, spec):
        return _format_padded("", "", v if p < 0 else v[:p], width + 0, fill + "", align + "",
                              "", 10)
    return text_format
'''
DIALECT_HELPERS["diagonal_of"] = '''\
def diagonal_of(x, axis1, axis2):
    """np.diagonal(x, 0, axis1, axis2) over the last two axes (Numba has no np.diagonal)."""
    if axis1 % x.ndim != x.ndim - 2 or axis2 % x.ndim != x.ndim - 1:
        raise ValueError("diagonal_of reads the diagonals of the last two axes")
    rows, cols = x.shape[-2], x.shape[-1]
    n = min(rows, cols)
    flat = np.ascontiguousarray(x).reshape(-1, rows * cols)
    out = np.empty((flat.shape[0], n), dtype=x.dtype)
    for b in range(flat.shape[0]):
        for i in range(n):
            out[b, i] = flat[b, i * (cols + 1)]
    return out.reshape(x.shape[:-2] + (n,))
'''


DIALECT_HELPERS["message_text"] = '''\
def message_text(v):
    """str(v), for an exception's message."""
    return str(v)
'''
DIALECT_HELPERS["message_format"] = '''\
def message_format(v, spec):
    """format(v, spec), for an exception's message or a print."""
    return format(v, spec)
'''


#: Dialect helpers Numba does not compile as they stand: plain Python functions compiled code
#: calls through a ``numba.extending.overload`` (which carries its own decorator).
DIALECT_NOT_COMPILED = frozenset({"batched_outer", "batched_outer_numba", "tanh_fast",
                                  "tanh_fast_numba", "exp_fast", "exp_fast_numba",
                                  "float_from_bits", "exp_of_number", "expm1_of_reduced",
                                  "tanh_of_number",
                                  "sum_of_products",
                                  "sum_of_products_numba", "sum_axis", "sum_axis_numba",
                                  "sum_axis_of_products", "sum_axis_of_products_numba",
                                  "small_dot", "small_dot_numba", "dot_of_any_dtype",
                                  "solve_stacks", "solve_stacks_numba",
                                  "dot_of_any_dtype_numba", "zeros_like_reusing",
                                  "zeros_like_reusing_numba", "add_at_numba",
                                  "subtract_at_numba", "stack_list_numba",
                                  "whole_max_numba", "whole_min_numba",
                                  "message_text_numba", "message_format_numba"})

#: Numba options a dialect helper is compiled with besides the module's own.
DIALECT_JIT_OPTIONS = {"reassociated_sum": "fastmath={'reassoc'}",
                       "sum_of_products_flat": "fastmath={'reassoc', 'contract'}"}

#: Helpers a dialect helper calls (emitted with it).
DIALECT_DEPENDS = {"var_axis": ("keep_axis", "mean_axis"), "tanh_fast": ("exp_fast",),
                   "sum_axis_of_products": ("sum_axis",),
                   "matmul_nd": ("dot_nd", "dot_of_any_dtype"),
                   "dot_nd": ("dot_of_any_dtype",), "small_dot": ("dot_of_any_dtype",),
                   "add_outer_at": ("add_at", "outer_product"),
                   "message_format": ("message_text",)}


def dialect_helper_source(names):
    """The source of the named dialect helpers and those they call, in a fixed order.

    >>> [s.split("(")[0] for s in dialect_helper_source({"var_axis"})]
    ['def keep_axis', 'def mean_axis', 'def var_axis']
    """
    wanted = set(names)
    for n in list(wanted):
        wanted.update(DIALECT_DEPENDS.get(n, ()))
    return [DIALECT_HELPERS[n] for n in sorted(wanted)]
