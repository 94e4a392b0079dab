"""A catalogue of unsupported or malformed inputs and the exact error each one gets.

Every program below is valid Python that we do not differentiate (or a call of the API that is
wrong); each must raise one AutodiffError subclass, exactly the one listed, whose text holds the
listed key words and, for errors about the user's source, names the file, the line marked
``# HERE`` and gives a hint. The programs live in a real module written to a temporary
directory, so ``inspect.getsource`` reads them as it reads a user's file.
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast import errors as E
from autodiff_ast.batching import BatchingError

PROGRAMS = '''
import math

import numpy as np

from autodiff_ast import vjp

G = 1.0


def try_except(x):
    try:  # HERE
        y = np.sin(x)
    except ValueError:
        y = x
    return y


def generator(x):
    yield x * 2.0  # HERE


def yield_from(x):
    yield from [x]  # HERE


def uses_global(x):
    global G  # HERE
    G = x
    return x * G


def defines_class(x):
    class Box:  # HERE
        pass
    return x * 2.0


def numpy_no_rule(x):
    return np.sum(np.linalg.svdvals(np.outer(x, x)))  # HERE


def math_no_rule(x):
    return math.lgamma(x) * x  # HERE


def method_no_rule(x):
    rng = np.random.default_rng(0)
    return x * rng.normal()  # HERE


def uses_eval(x):
    return eval("x * 2.0")  # HERE


def splat_call(x):
    parts = (x, x)
    return np.sum(np.add(*parts))  # HERE


def star_params(*xs):  # HERE
    return np.sum(xs[0])


def kw_params(x, **kw):  # HERE
    return np.sum(x)


def nonscalar(x):
    return np.sin(x)  # HERE


def returns_pair(x):
    return x * 2.0, x  # HERE


def returns_none(x):
    y = x * 2.0
    return None  # HERE


def returns_string(x):
    return "hello"  # HERE


def returns_dict(x):
    return {"a": np.sum(x)}  # HERE


def calls_vjp(x):
    out, pullback = vjp(np.sin, x)  # HERE
    return np.sum(pullback(x)[0])


def with_block(x):
    with open("data.txt") as fh:  # HERE
        y = x * 2.0
    return y


def view_write(x):
    y = np.zeros_like(x)
    v = y[1:]
    v[0] = np.sum(x)  # HERE
    return np.sum(y * x)


def shared_in_place_add(x):
    y = np.tanh(x)
    z = y
    y += x  # HERE
    return np.sum(y * z)


def _scale_first(v):
    v[0] = v[0] * 2.0
    return np.sum(v)


def helper_writes_argument(x):
    y = np.tanh(x)
    total = _scale_first(y)  # HERE
    return total + np.sum(y)


def rank_changes_in_loop(x):
    y = 0.0
    for i in range(3):
        y = y + x  # HERE
    return np.sum(y)


def rank_changes_in_branch(x):
    if np.sum(x) > 0:
        y = x
    else:
        y = 1.0  # HERE
    return np.sum(y)


def deletes(x):
    ys = [x, x * 2.0]
    del ys[0]  # HERE
    return ys[0]


def imports(x):
    import os  # HERE
    return x


def raises(x):
    if x > 0:
        raise ValueError("bad", x)  # HERE
    return x


def for_else(x):
    s = 0.0
    for i in range(3):  # HERE
        s = s + x
    else:
        s = s * 2.0
    return s


def while_else(x):
    while x < 3.0:  # HERE
        x = x + 1.0
    else:
        x = x * 2.0
    return x


def star_unpack(x):
    a, *rest = x  # HERE
    return a


def set_literal(x):
    s = {1.0, 2.0}  # HERE
    return x


def dict_comprehension(x):
    d = {k: x for k in range(3)}  # HERE
    return d[0]


def generator_to_stack(x):
    return np.sum(np.stack(x * i for i in range(3)))  # HERE


def sorts_in_place(x):
    y = x.copy()
    y.sort()  # HERE
    return np.sum(y * x)


def effect_call(x):
    np.random.seed(0)  # HERE
    return x * 2.0


def f_string(x):
    s = f"{x}"  # HERE
    return x


def match_statement(x):
    match x:  # HERE
        case 1.0:
            return x
    return x


def walrus(x):
    if (y := x * 2.0) > 1.0:  # HERE
        return y
    return x


def sets_attribute(x):
    np.thing = x  # HERE
    return x


def decorated_inner(x):
    @staticmethod
    def g(v):  # HERE
        return v
    return x


def rebinds_nonlocal(x):
    y = x

    def bump():
        nonlocal y  # HERE
        y = y * 2.0
    bump()
    return y


def where_indices(x):
    i = np.where(x > 0)[0]  # HERE
    return np.sum(x[i] ** 2)


def sliced_list(x):
    t = [a * a for a in x]
    return np.sum(np.array(t[1:]))  # HERE


def plain(x):
    return np.sum(x * x)


def two_args(x, y):
    return np.sum(x * y)


def aux_not_pair(x):
    return np.sum(x)
'''


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    path = tmp_path_factory.mktemp("catalogue") / "catalogue_programs.py"
    path.write_text(PROGRAMS)
    spec = importlib.util.spec_from_file_location("catalogue_programs", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["catalogue_programs"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("catalogue_programs", None)


def _here(name):
    """The line marked ``# HERE`` in program `name` (1-based, in the module file)."""
    lines = PROGRAMS.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"def {name}("))
    for i in range(start, len(lines)):
        if "# HERE" in lines[i]:
            return i + 1
    raise AssertionError(f"no # HERE in {name}")


X = np.array([0.3, 0.5, 0.7])

# (program, argument, error class, words the message must hold)
SOURCE_ERRORS = [
    ("where_indices", X, E.UnsupportedSyntaxError,
     "np.where(condition) with one argument (the indices where it holds) is not supported"),
    ("try_except", 0.4, E.UnsupportedSyntaxError, "try/except"),
    ("sliced_list", X, E.UnsupportedSyntaxError, "slicing the list t (t[1:]) is not supported"),
    ("generator", 0.4, E.UnsupportedSyntaxError, "yield is not supported"),
    ("yield_from", 0.4, E.UnsupportedSyntaxError, "yield from is not supported"),
    ("uses_global", 0.4, E.UnsupportedSyntaxError, "global declarations"),
    ("defines_class", 0.4, E.UnsupportedSyntaxError, "class definitions"),
    ("numpy_no_rule", X, E.MissingRuleError, "np.linalg.svdvals has no derivative rule"),
    ("math_no_rule", 0.4, E.MissingRuleError, "math.lgamma has no derivative rule"),
    ("method_no_rule", 0.4, E.MissingRuleError, ".normal() has no derivative rule"),
    ("uses_eval", 0.4, E.MissingRuleError, "eval has no derivative rule"),
    ("splat_call", X, E.UnsupportedSyntaxError, "*args or **kwargs splats"),
    ("star_params", X, E.UnsupportedSyntaxError, "taking *args or **kwargs"),
    ("kw_params", X, E.UnsupportedSyntaxError, "taking *args or **kwargs"),
    ("nonscalar", X, E.NonScalarOutputError, "grad requires a real scalar output"),
    ("returns_pair", 0.4, E.NonScalarOutputError, "returns a tuple of 2 values"),
    ("returns_none", 0.4, E.NonScalarOutputError, "returns None"),
    ("returns_string", 0.4, E.NonScalarOutputError, "returns the constant 'hello'"),
    ("returns_dict", X, E.NonScalarOutputError, "returns a dict"),
    ("calls_vjp", X, E.UnsupportedSyntaxError,
     "vjp(...) inside transformed code is not supported: the pullback it returns"),
    ("with_block", 0.4, E.UnsupportedSyntaxError, "with np.errstate"),
    ("view_write", X, E.UnsupportedSyntaxError, "shares memory with v"),
    ("shared_in_place_add", X, E.UnsupportedSyntaxError, "z shares memory with y"),
    ("helper_writes_argument", X, E.UnsupportedSyntaxError,
     "_scale_first writes into its parameter v in place"),
    ("rank_changes_in_loop", X, E.TypeInferenceError, "y changes from float64 to float64[N]"),
    ("rank_changes_in_branch", X, E.TypeInferenceError, "y changes from float64[N] to float64"),
    ("deletes", 0.4, E.UnsupportedSyntaxError, "del of an element"),
    ("imports", 0.4, E.UnsupportedSyntaxError, "imports are not supported"),
    ("raises", 0.4, E.UnsupportedSyntaxError, "raise"),
    ("for_else", 0.4, E.UnsupportedSyntaxError, "for/else is not supported"),
    ("while_else", 0.4, E.UnsupportedSyntaxError, "while/else is not supported"),
    ("star_unpack", X, E.UnsupportedSyntaxError, "unpack"),
    ("set_literal", 0.4, E.UnsupportedSyntaxError, "a set display"),
    ("dict_comprehension", 0.4, E.UnsupportedSyntaxError, "a dict comprehension"),
    ("generator_to_stack", 0.4, E.UnsupportedSyntaxError, "a generator expression"),
    ("sorts_in_place", X, E.UnsupportedSyntaxError, "expression statements"),
    ("effect_call", 0.4, E.UnsupportedSyntaxError, "expression statements"),
    ("f_string", 0.4, E.UnsupportedSyntaxError, "an f-string"),
    ("match_statement", 0.4, E.UnsupportedSyntaxError, "match statements"),
    ("walrus", 0.4, E.UnsupportedSyntaxError, "the walrus operator"),
    ("sets_attribute", 0.4, E.UnsupportedSyntaxError, "cannot assign to"),
    ("decorated_inner", 0.4, E.UnsupportedSyntaxError, "decorated nested functions"),
    ("rebinds_nonlocal", 0.4, E.UnsupportedSyntaxError, "nonlocal statements are not supported"),
]


@pytest.mark.parametrize("name, arg, cls, words", SOURCE_ERRORS,
                         ids=[case[0] for case in SOURCE_ERRORS])
def test_source_error(programs, name, arg, cls, words):
    fn = getattr(programs, name)
    with pytest.raises(E.AutodiffError) as info:
        ad.grad(fn)(arg)
    err = info.value
    assert type(err) is cls, f"{type(err).__name__}: {err}"
    assert words in str(err)
    assert err.filename == programs.__file__
    assert err.lineno == _here(name), str(err)
    assert err.hint, f"no hint: {err}"


# (label, call, error class, words the message must hold)
def _api_cases(p):
    return [
        ("int input", lambda: ad.grad(p.plain)(3), E.NonFloatInputError, "is int64"),
        ("int array", lambda: ad.grad(p.plain)(np.array([1, 2])), E.NonFloatInputError,
         "is int64"),
        ("bool input", lambda: ad.grad(p.plain)(True), E.NonFloatInputError, "is bool"),
        ("bool array", lambda: ad.grad(p.plain)(np.array([True])), E.NonFloatInputError,
         "is bool"),
        ("complex input", lambda: ad.grad(p.plain)(1.0 + 2.0j), E.NonFloatInputError,
         "is complex"),
        ("complex array", lambda: ad.grad(p.plain)(np.array([1.0 + 2.0j])),
         E.NonFloatInputError, "is complex"),
        ("float16", lambda: ad.grad(p.plain)(np.ones(2, np.float16)), E.NonFloatInputError,
         "is float16"),
        ("string input", lambda: ad.grad(p.plain)("abc"), E.NonFloatInputError,
         "real floating-point inputs"),
        ("None input", lambda: ad.grad(p.plain)(None), E.NonFloatInputError,
         "real floating-point inputs"),
        ("int in value_and_grad", lambda: ad.value_and_grad(p.plain)(2), E.NonFloatInputError,
         "is int64"),
        ("argnums out of range", lambda: ad.grad(p.plain, argnums=2)(1.0), E.ArgnumsError,
         "names argument 2, but plain takes 1"),
        ("negative argnums", lambda: ad.grad(p.two_args, argnums=-3)(1.0, 2.0),
         E.ArgnumsError, "names argument -3"),
        ("float argnums", lambda: ad.grad(p.plain, argnums=0.5)(1.0), E.ArgnumsError,
         "must be an int or a tuple of ints"),
        ("repeated argnums", lambda: ad.grad(p.two_args, argnums=(0, 0))(1.0, 2.0),
         E.ArgnumsError, "names an argument twice"),
        ("has_aux without a pair", lambda: ad.grad(p.aux_not_pair, has_aux=True)(X),
         E.UnsupportedSyntaxError, "has_aux=True needs the function to return a pair"),
        ("vmap sizes", lambda: ad.vmap(p.two_args)(np.ones((3, 2)), np.ones((4, 2))),
         BatchingError, "inconsistent sizes"),
        ("vmap in_axes length", lambda: ad.vmap(p.two_args, in_axes=(0,))(
            np.ones((3, 2)), np.ones((3, 2))), BatchingError, "in_axes has 1 entries"),
        ("vmap axis out of range", lambda: ad.vmap(p.plain, in_axes=3)(np.ones((3, 2))),
         BatchingError, "along axis 3, but it has rank 2"),
        ("jvp tangent shape", lambda: ad.jvp(p.plain, (np.ones(3),), (np.ones(2),)),
         E.ShapeMismatchError, "a tangent of shape (2,)"),
        ("vjp cotangent shape", lambda: ad.vjp(np.sin, np.ones(3))[1](np.ones(2)),
         E.ShapeMismatchError, "the cotangent has shape"),
        ("C function without a rule", lambda: ad.grad(np.linalg.svdvals)(np.eye(2)),
         E.SourceUnavailableError, "not a Python function and has no rule"),
        ("not a function", lambda: ad.grad(3.0)(1.0), E.SourceUnavailableError,
         "cannot differentiate 3.0"),
        ("second order with a pytree", lambda: ad.grad(ad.grad(lambda q: q["a"] ** 3))(
            {"a": 1.0}), E.UnsupportedError, "with pytree arguments"),
        ("jacfwd of an int array", lambda: ad.jacfwd(p.plain)(np.array([1, 2])),
         E.NonFloatInputError, "jacfwd(plain) requires real floating-point inputs, but "
                               "argument 'x' is int64"),
        ("jacrev of an int array", lambda: ad.jacrev(p.plain)(np.array([1, 2])),
         E.NonFloatInputError, "jacrev(plain) requires real floating-point inputs, but "
                               "argument 'x' is int64"),
        ("hessian of an int", lambda: ad.hessian(p.plain)(3), E.NonFloatInputError,
         "hessian(plain) requires real floating-point inputs, but argument 'x' is int64"),
        ("grad with a missing argument", lambda: ad.grad(p.two_args)(1.0), E.ArgumentError,
         "grad(two_args) was called as two_args(float): missing a required argument: 'y'"),
        ("jit with a missing argument", lambda: ad.jit(p.two_args)(X), E.ArgumentError,
         "jit(two_args) was called as two_args(ndarray): missing a required argument: 'y'"),
        ("jacrev with a keyword twice", lambda: ad.jacrev(p.two_args)(X, X, x=X),
         E.ArgumentError, "jacrev(two_args) was called as two_args(ndarray, ndarray, "
                          "x=ndarray): multiple values for argument 'x'"),
        ("vmap with an extra argument", lambda: ad.vmap(p.plain)(X, X), E.ArgumentError,
         "vmap(plain) was called as plain(ndarray, ndarray): too many positional arguments"),
        ("grad with an unknown keyword", lambda: ad.grad(p.plain)(X, scale=2.0),
         E.ArgumentError, "got an unexpected keyword argument 'scale'"),
        ("jit unhashable static", lambda: ad.jit(p.two_args, static_argnums=1)(X, [1.0]),
         E.StaticArgumentError, "jit(two_args): static argument 'y' must be hashable (jit "
                                "compiles one version per value), got list"),
        ("jit unknown static name", lambda: ad.jit(p.two_args, static_argnames="yy")(X, 1.0),
         E.StaticArgumentError, "jit(two_args): static_argnames names 'yy', but the "
                                "function's arguments are x, y"),
        ("jit static argnum out of range", lambda: ad.jit(p.two_args, static_argnums=2)(X, X),
         E.ArgnumsError, "jit(two_args): static_argnums (2,) names argument 2, but the "
                         "function takes 2"),
        ("grad of a static float", lambda: ad.jit(ad.grad(p.two_args, argnums=1),
                                                   static_argnums=1)(X, 1.5),
         E.NonFloatInputError, "grad differentiates argument 'y' but jit's static_argnums/"
                               "static_argnames make it a constant of the compiled code (1.5)"),
    ]


_LABELS = [case[0] for case in _api_cases(type("P", (), {
    "plain": None, "two_args": None, "aux_not_pair": None}))]


@pytest.mark.parametrize("label", _LABELS)
def test_api_error(programs, label):
    _, call, cls, words = next(c for c in _api_cases(programs) if c[0] == label)
    with pytest.raises(E.AutodiffError) as info:
        call()
    assert type(info.value) is cls, f"{type(info.value).__name__}: {info.value}"
    assert words in str(info.value)
    assert info.value.hint, f"no hint: {info.value}"


@pytest.mark.parametrize("label", ["jit unknown static name", "jit static argnum out of range",
                                   "jit unhashable static", "grad of a static float"])
def test_jit_argument_errors_name_the_function_s_file(programs, label):
    _, call, _, _ = next(c for c in _api_cases(programs) if c[0] == label)
    with pytest.raises(E.AutodiffError) as info:
        call()
    assert info.value.filename == programs.__file__
    assert info.value.lineno == programs.two_args.__code__.co_firstlineno


def test_catalogue_is_large_enough():
    assert len(SOURCE_ERRORS) + len(_LABELS) >= 40


def test_errors_keep_python_exception_types():
    """The API errors are also the exceptions JAX raises (TypeError, ValueError)."""
    assert issubclass(E.NonFloatInputError, TypeError)
    assert issubclass(E.ArgnumsError, ValueError)
    assert issubclass(E.ShapeMismatchError, ValueError)
    assert issubclass(E.UnsupportedError, NotImplementedError)


def test_jacfwd_refuses_integer_inputs_of_numpy_functions():
    with pytest.raises(E.NonFloatInputError, match=r"^jacfwd\(sin\) requires real floating"):
        ad.jacfwd(np.sin)(np.array([1, 2]))


def test_jacobians_place_keyword_arguments_by_name():
    y = np.array([2.0, 3.0])
    assert np.array_equal(ad.jacrev(lambda x, y: x * y)(np.ones(2), y=y), np.diag(y))
    assert np.array_equal(ad.jacfwd(lambda x, y: x * y, argnums=1)(np.ones(2), y=y), np.eye(2))


def test_argument_errors_are_also_python_type_errors():
    """As for a plain call (and JAX): a missing argument is a TypeError, an unhashable static
    argument a ValueError."""
    assert issubclass(E.ArgumentError, TypeError)
    assert issubclass(E.StaticArgumentError, ValueError)
    with pytest.raises(TypeError, match="missing a required argument"):
        ad.value_and_grad(lambda a, b: a * b)(1.0)
    with pytest.raises(TypeError, match="missing a required argument"):
        ad.jvp(lambda a, b: a * b, (1.0,), (1.0,))


def test_checker_fails_on_a_deliberately_wrong_rule():
    """check_grads (the fuzzer's checker) raises for a rule whose partial is wrong, in forward
    mode, in reverse mode and at order 2, and passes the same program with the right rule."""
    def cube(x):
        return x * x * x

    def cube_right(x):
        return x * x * x

    ad.register_rule(cube, partials="2.0 * x * x")  # should be 3 x^2
    ad.register_rule(cube_right, partials="3.0 * x * x")

    def wrong(x):
        return np.sum(cube(x))

    def right(x):
        return np.sum(cube_right(x))
    for modes in (("fwd",), ("rev",)):
        with pytest.raises(AssertionError, match="disagrees with finite differences"):
            ad.check_grads(wrong, (X,), order=1, modes=modes)
    with pytest.raises(AssertionError, match="disagrees"):
        ad.check_grads(wrong, (X,), order=2, modes=("rev",))
    ad.check_grads(right, (X,), order=2, modes=("fwd", "rev"))
