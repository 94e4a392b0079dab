"""Errors about user code: the right AutodiffError subclass, naming the file, the line, the
offending code and what to do instead."""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast import (
    ArgnumsError,
    AutodiffError,
    MissingRuleError,
    NonFloatInputError,
    NonScalarOutputError,
    UnsupportedSyntaxError,
)

THIS_FILE = os.path.basename(__file__)
G = 1.0


def line_of(fn, text):
    """The line number in this file of the first line of `fn` containing `text`."""
    lines, first = inspect.getsourcelines(fn)
    for k, line in enumerate(lines):
        if text in line:
            return first + k
    raise AssertionError(f"{text!r} not in {fn.__name__}")


def raised(cls, fn, *args, **options):
    with pytest.raises(cls) as info:
        ad.grad(fn, **options)(*args)
    err = info.value
    assert isinstance(err, AutodiffError)
    return err


def assert_located(err, fn, text):
    """The error names this file and the line holding `text`, and quotes it."""
    line = line_of(fn, text)
    message = str(err)
    assert err.filename == __file__
    assert err.lineno == line
    assert f"{THIS_FILE}:{line}:" in message
    assert f"{THIS_FILE}:{line}:" in err.one_line()
    assert "\n" not in err.one_line()
    return message


# ---------------------------------------------------------------- unsupported syntax
def uses_try(x):
    try:
        y = x * 2.0
    except ValueError:
        y = x
    return y


def uses_global(x):
    global G
    return x * G


def uses_nonlocal_like_class(x):
    class Local:
        pass
    return x


def uses_set_comprehension(x):
    ys = {x * k for k in range(3)}
    return len(ys)


def uses_generator_expression(x):
    return np.sum(np.stack(x * k for k in range(3)))


def uses_dict_comprehension(x):
    d = {k: x for k in range(2)}
    return d[0]


def is_a_generator(x):
    yield x * 2.0


def uses_fstring(x):
    label = f"value {x}"  # noqa: F841
    return x


def uses_walrus(x):
    return (y := x * 2.0) + y


def uses_effect_call(x):
    np.random.seed(0)
    return x * x


def uses_import(x):
    import math
    return math.sin(x)


def uses_del(x):
    ys = [x, x * 2.0]
    del ys[0]
    return ys[0]


def uses_star_args(*xs):
    return xs[0]


def uses_complex(x):
    return np.sum(np.abs(np.exp(1j * x)))  # complex numbers: once a wrong derivative


UNSUPPORTED = [
    (uses_try, "try:", "try/except", "outside"),
    (uses_global, "global G", "global", "argument"),
    (uses_nonlocal_like_class, "class Local", "class", "outside"),
    (uses_set_comprehension, "ys = {", "set comprehension", "sets"),
    (uses_generator_expression, "return np.sum(", "generator expression", "build a list"),
    (uses_dict_comprehension, "d = {", "dict comprehension", "outside"),
    (is_a_generator, "yield", "yield", "return"),
    (uses_fstring, 'label = f"', "f-string", "outside"),
    (uses_walrus, ":=", "walrus", "own statement"),
    (uses_effect_call, "    np.random.seed(0)", "expression statements", "remove"),
    (uses_import, "import math", "import", "module level"),
    (uses_del, "del ys[0]", "del of an element", ""),
    (uses_star_args, "def uses_star_args", "*args", "parameters"),
    (uses_complex, "np.exp(1j * x)", "complex numbers", "real and imaginary"),
]


@pytest.mark.parametrize("fn,line_text,what,hint", UNSUPPORTED,
                         ids=[e[0].__name__ for e in UNSUPPORTED])
def test_unsupported_syntax_names_file_line_and_hint(fn, line_text, what, hint):
    err = raised(UnsupportedSyntaxError, fn, 1.0)
    message = assert_located(err, fn, line_text)
    assert what in err.message
    assert err.hint and hint in err.hint
    assert "hint: " in message
    if not line_text.startswith("def "):  # the offending code is quoted
        assert line_text in message


# ---------------------------------------------------------------- missing rule
def calls_fft(x):
    spectrum = np.fft.fft(x)
    return np.sum(spectrum.real)


def calls_unknown_numpy(x):
    return np.sum(np.correlate(x, x))


def calls_builtin_without_rule(x):
    return np.sum(sorted(x))


def calls_unknown_method(x):
    return x.ptp()


def calls_ufunc_method(x):
    return np.add.reduce(x * x)  # a callable whose __module__ is None


@pytest.mark.parametrize("fn,line_text,name", [
    (calls_ufunc_method, "np.add.reduce", "reduce"),
    (calls_fft, "np.fft.fft", "np.fft.fft"),
    (calls_unknown_numpy, "np.correlate", "np.correlate"),
    (calls_builtin_without_rule, "sorted(x)", "sorted"),
    (calls_unknown_method, "x.ptp()", ".ptp()"),
], ids=["ufunc-method", "fft", "correlate", "builtin-sorted", "method"])
def test_missing_rule(fn, line_text, name):
    err = raised(MissingRuleError, fn, np.ones(4))
    message = assert_located(err, fn, line_text)
    assert name in err.message and "rule" in err.message
    assert "adding-a-rule" in err.hint or "NumPy function" in err.hint
    assert line_text in message


def test_missing_rule_for_an_unsupported_option():
    def diff_four_times(x):
        return np.sum(np.diff(x, n=4) ** 2)  # (n up to 3 has a template)
    err = raised(MissingRuleError, diff_four_times, np.ones(6))
    assert_located(err, diff_four_times, "np.diff")
    assert "these argument ranks or options" in err.message


def median_of_two_axes(x):
    return np.sum(np.median(x, axis=(0, 1)))


def average_returned(x):
    return np.average(x, weights=x * x, returned=True)[0]


def cross_along_the_first_axis(x):
    return np.sum(np.cross(x, x[::-1], axis=0))


@pytest.mark.parametrize("fn,line_text,shape", [
    (median_of_two_axes, "np.median", (2, 3, 2)),
    (average_returned, "np.average", (3,)),
    (cross_along_the_first_axis, "np.cross", (3, 2)),
], ids=["median-axes", "average-returned", "cross-axis"])
def test_refused_options_of_new_rules(fn, line_text, shape):
    err = raised(MissingRuleError, fn, np.ones(shape))
    assert_located(err, fn, line_text)
    assert "these argument ranks or options" in err.message


def take_clipped(x, k):
    return np.sum(np.take(x, np.array([0, 7]), mode="clip") ** 2)


def take_along_a_named_axis(x, k):
    return np.sum(np.take(x, 0, axis=k) ** 2)


def repeat_along_a_named_axis(x, k):
    return np.sum(np.repeat(x, 2, axis=k) ** 2)


def rot90_by_named_turns(x, k):
    return np.sum(np.rot90(x, k) * x.T)


def diagflat_at_a_named_offset(x, k):
    return np.sum(np.diagflat(x, k) ** 2)


def kron_of_a_number(x, k):
    return np.sum(np.kron(2.0, x) ** 2)


@pytest.mark.parametrize("fn,line_text", [
    (take_clipped, "np.take"), (take_along_a_named_axis, "np.take"),
    (repeat_along_a_named_axis, "np.repeat"), (rot90_by_named_turns, "np.rot90"),
    (diagflat_at_a_named_offset, "np.diagflat"), (kron_of_a_number, "np.kron"),
], ids=["take-mode", "take-axis-name", "repeat-axis-name", "rot90-k-name", "diagflat-k-name",
        "kron-number"])
def test_refused_options_of_the_newer_rules(fn, line_text):
    """Options with no template (a mode, an axis/turns/offset held in a name, a number in
    kron) are refused at the user's line, not differentiated wrongly."""
    err = raised(MissingRuleError, fn, np.ones((2, 2)), np.array(1))  # (known at run time)
    assert_located(err, fn, line_text)
    assert "these argument ranks or options" in err.message or \
        "is only known at run time" in err.message


def test_missing_rule_for_an_unsupported_norm():
    def norm_ord(x):
        return np.linalg.norm(x, ord="nuc", axis=(0, 1))  # (a pair of axes: no template)
    err = raised(MissingRuleError, norm_ord, np.ones((3, 3)))
    assert_located(err, norm_ord, "np.linalg.norm")
    assert "these argument ranks or options" in err.message


def percentile_output(x):
    return np.percentile(x, 50.0)


def test_missing_rule_of_the_output_comes_before_the_output_check():
    """A call with no rule returned by grad's function: its type is only a guess (the
    broadcast of its arguments), so the missing rule is named, not a non-scalar output."""
    err = raised(MissingRuleError, percentile_output, np.ones(4))
    assert_located(err, percentile_output, "np.percentile")
    assert "np.percentile has no derivative rule" in err.message


def test_primitive_without_rule_given_to_grad():
    with pytest.raises(AutodiffError, match="no rule"):
        ad.grad(np.correlate)(0.5)


# ---------------------------------------------------------------- non-scalar output
def vector_output(x):
    return x * 2.0


def tuple_output(x):
    return x, x


def test_non_scalar_output():
    err = raised(NonScalarOutputError, vector_output, np.ones(3))
    message = assert_located(err, vector_output, "return x * 2.0")
    assert "scalar" in err.message and "float64[N]" in err.message
    assert "np.sum" in err.hint and "vjp" in err.hint
    assert isinstance(err, TypeError)  # like JAX, also a TypeError
    assert "return x * 2.0" in message


def no_return(x):
    y = x * 2.0  # noqa: F841


def test_tuple_output_without_has_aux():
    err = raised(NonScalarOutputError, tuple_output, 1.0)
    assert_located(err, tuple_output, "return x, x")
    assert "tuple of 2" in err.message and "has_aux" in err.hint


def test_function_returning_none():
    err = raised(NonScalarOutputError, no_return, 1.0)
    assert "None" in err.message


def test_has_aux_needs_a_pair():
    err = raised(UnsupportedSyntaxError, vector_output, 1.0, has_aux=True)
    assert_located(err, vector_output, "return x * 2.0")
    assert "pair" in err.message


# ---------------------------------------------------------------- bad argnums
def two_args(x, y):
    return x * y


@pytest.mark.parametrize("argnums,fragment", [
    (2, "names argument 2"),
    (-3, "names argument -3"),
    ((0, 5), "names argument 5"),
    ((0, 0), "twice"),
    ((1, -1), "twice"),
    (1.5, "int or a tuple of ints"),
    ("0", "int or a tuple of ints"),
    ((0, 1.0), "int or a tuple of ints"),
], ids=["too-big", "too-negative", "tuple-out-of-range", "duplicated", "duplicated-negative",
        "float", "string", "tuple-with-float"])
def test_bad_argnums(argnums, fragment):
    err = raised(ArgnumsError, two_args, 1.0, 2.0, argnums=argnums)
    assert fragment in err.message
    assert_located(err, two_args, "def two_args")
    assert isinstance(err, ValueError)


@pytest.mark.parametrize("transform", [ad.jacfwd, ad.jacrev, ad.hessian],
                         ids=lambda t: t.__name__)
@pytest.mark.parametrize("argnums", [2, -3, (0, 2)])
def test_bad_argnums_of_the_jacobians(transform, argnums):
    with pytest.raises(ArgnumsError) as info:  # (an IndexError from inside once)
        transform(two_args, argnums=argnums)(1.0, 2.0)
    assert_located(info.value, two_args, "def two_args")
    assert "names argument" in info.value.message


def test_argnums_error_lists_the_parameters():
    err = raised(ArgnumsError, two_args, 1.0, 2.0, argnums=4)
    assert "x, y" in err.message and "between 0 and 1" in err.hint


# ---------------------------------------------------------------- non-float inputs
def square_sum(x):
    return np.sum(x * x)


@pytest.mark.parametrize("value,what", [
    (3, "int"),
    (True, "bool"),
    (1.0 + 2.0j, "complex"),
    (np.array([1, 2, 3]), "int"),
    (np.array([True, False]), "bool"),
    (np.array([1.0 + 1.0j]), "complex"),
], ids=["int", "bool", "complex", "int-array", "bool-array", "complex-array"])
def test_non_float_input(value, what):
    err = raised(NonFloatInputError, square_sum, value)
    assert what in err.message and "'x'" in err.message
    assert "float" in err.hint
    assert_located(err, square_sum, "def square_sum")
    assert isinstance(err, TypeError)


def test_non_float_leaf_of_a_pytree():
    def f(p):
        return p["w"] * 2.0
    err = raised(NonFloatInputError, f, {"w": 3})
    assert "p_w" in err.message


def test_integer_argument_outside_argnums_is_fine():
    assert ad.grad(two_args)(2.0, 3) == pytest.approx(3.0)


# ---------------------------------------------------------------- the hierarchy
def test_every_error_class_derives_from_autodiff_error():
    for cls in (UnsupportedSyntaxError, MissingRuleError, NonScalarOutputError, ArgnumsError,
                NonFloatInputError, ad.SourceUnavailableError):
        assert issubclass(cls, AutodiffError)


def test_function_without_source():
    namespace = {}
    exec("def hidden(x):\n    return x * x\n", namespace)
    with pytest.raises(ad.SourceUnavailableError) as info:
        ad.grad(namespace["hidden"])(1.0)
    assert "linecache" in info.value.hint


def sum_along(x, k):
    return np.sum(np.sum(x, axis=k) ** 2)


def test_an_option_known_only_at_run_time_is_refused_not_read_as_the_default():
    """`np.sum(x, axis=k)` with k known only at run time (a 0-d array argument): the reverse
    template needs the axis where the code is generated; it read None (the default) and the
    gradient failed inside the generated code. Refused at the user's line now; a static
    argument under jit is a constant, and works (it was refused as "only dtypes and
    constants"), as is a Python int argument (tests/test_concrete_ints.py)."""
    x = np.arange(1.0, 7.0).reshape(2, 3)
    err = raised(MissingRuleError, sum_along, x, np.array(1))
    assert_located(err, sum_along, "np.sum")
    assert "np.sum's axis is only known at run time" in err.message
    from autodiff_ast.jit import jit
    np.testing.assert_allclose(jit(ad.grad(sum_along), static_argnums=1)(x, 1),
                               2.0 * np.sum(x, axis=1, keepdims=True) * np.ones_like(x))
    np.testing.assert_allclose(ad.grad(lambda v, n: np.sum(v ** n))(x, 3), 3.0 * x ** 2)


def doubled_sum_along(x, k):
    return np.sum(x, axis=k) * 2.0


def test_vmap_refuses_an_axis_known_only_at_run_time():
    """vmap of np.sum(x, axis=k) with k an argument summed every axis (a batch of numbers
    where NumPy gives a batch of rows): refused at the line now."""
    xs = np.arange(24.0).reshape(2, 3, 4)
    with pytest.raises(MissingRuleError) as info:
        ad.vmap(doubled_sum_along, in_axes=(0, None))(xs, np.array(1))
    err = info.value
    assert_located(err, doubled_sum_along, "np.sum")
    assert "axis is only known at run time" in err.message


# ---------------------------------------------------------------- session 43's custom-rule
# and checkpoint hunt: messages that named the wrong thing
def _return_in_checkpointed_loop(x, n):
    y = x.copy()
    for _ in ad.checkpoint(range(n)):
        y = y + 0.1 * np.tanh(y)
        if np.max(y) > 2.0:
            return np.sum(y)
    return np.sum(y * y)


def _break_in_checkpointed_loop(x, n):
    y = x.copy()
    for _ in ad.checkpoint(range(n)):
        y = y + 0.1 * np.tanh(y)
        if np.sum(y) > 3.0:
            break
    return np.sum(y ** 2)


@pytest.mark.parametrize("fn, word", [(_return_in_checkpointed_loop, "return"),
                                      (_break_in_checkpointed_loop, "break")])
def test_leaving_a_checkpointed_loop_is_refused_for_what_it_is(fn, word):
    # Both were told "break is supported in `for i in range(...)` loops" (a range loop, and
    # a return, not a break).
    with pytest.raises(UnsupportedSyntaxError) as info:
        ad.grad(fn)(np.array([0.3, -0.8, 1.1]), 5)
    message = assert_located(info.value, fn, "for _ in ad.checkpoint(range(n)):")
    assert f"{word} inside a checkpointed loop" in message


@ad.custom_vjp
def _scaled_by_entry(p, x):
    return p["w"] * x


def _scaled_fwd(p, x):
    return _scaled_by_entry(p, x), (p, x)


def _scaled_bwd(res, g):
    p, x = res
    return {"w": g * x}, g * p["w"]


_scaled_by_entry.defvjp(_scaled_fwd, _scaled_bwd)


def _custom_of_a_dict(p, x):
    return np.sum(_scaled_by_entry(p, x))


def test_a_custom_function_given_a_dict_says_what_to_do():
    x = np.array([0.3, -0.8, 1.1])
    with pytest.raises(UnsupportedSyntaxError) as info:
        ad.grad(_custom_of_a_dict)({"w": x}, x)
    message = assert_located(info.value, _custom_of_a_dict, "_scaled_by_entry(p, x)")
    assert "pass the entries as arguments of their own" in message
