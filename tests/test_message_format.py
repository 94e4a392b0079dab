"""Format specs under jit: codegen/helpers.py's message_format writes format(v, spec) inside
compiled code (Numba has no format()), checked against Python's own format() over a grid of
specs and values, decimal ties of the binary value included."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from codegen.helpers import OVERLOAD_FORMS

_NS = {"np": np, "numba": numba}
exec(OVERLOAD_FORMS["message_text"], _NS)
exec(OVERLOAD_FORMS["message_format"], _NS)

FLOAT_SPECS = (".3f", ".0f", "8.2f", "<8.2f", "^9.1f", "+.2f", " .2f", "08.3f", ".2e", ".0e",
               "10.3E", ".3g", "g", ".10g", ".2%", "%", ".4", "f", "e", "G", "x>10.2f",
               "*^11.3e", ".1g", ".6g", ".5f", "n")
INT_SPECS = ("d", "5d", "<5d", "+d", "05d", ".2f", "e", "", "^7", "n")
TEXT_SPECS = ("", "10", ">10", "^10", ".2", "*<8")


def _all(specs):
    """One compiled function writing a value with every spec (one compile per value type)."""
    body = ", ".join(f"message_format(v, {spec!r})" for spec in specs)
    exec(f"@numba.njit\ndef formats(v):\n    return ({body},)\n", _NS)
    return _NS["formats"]


@pytest.fixture(scope="module")
def float_formats():
    return _all(FLOAT_SPECS)


FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 2.675, 0.0195, 0.0025, 99999.95, 123.456, -0.000123456,
          1e-7, 6.02e12, 3.14159265358979, 0.099996, 12345678.9, float("nan"), float("inf"),
          -float("inf")]


@pytest.mark.parametrize("value", FLOATS)
def test_floats_as_python_writes_them(float_formats, value):
    assert float_formats(value) == tuple(format(value, spec) for spec in FLOAT_SPECS)


def test_random_floats_and_ties(float_formats):
    rng = np.random.default_rng(1)
    values = list(10.0 ** rng.uniform(-10, 12, 300) * rng.choice([-1.0, 1.0], 300))
    values += [k / 8 for k in range(-40, 40)] + [k / 1000 + 0.0005 for k in range(100)]
    for value in values:
        assert float_formats(value) == tuple(format(value, spec) for spec in FLOAT_SPECS), value


@pytest.fixture(scope="module")
def int_formats():
    return _all(INT_SPECS)


@pytest.mark.parametrize("value", [0, 7, -42, 123456])
def test_ints_as_python_writes_them(int_formats, value):
    assert int_formats(value) == tuple(format(value, spec) for spec in INT_SPECS)


def test_text_as_python_writes_it():
    formats = _all(TEXT_SPECS)
    for value in ("abc", "hello world"):
        assert formats(value) == tuple(format(value, spec) for spec in TEXT_SPECS)


# ---------------------------------------------------------------- session 48: specs that were
# written wrongly (x, o, b, c, grouping, #, z, = as the plain decimal value; .20f and values
# from 9e18 on in scientific notation; decimal ties beyond 10**22 approximately)
MORE_FLOAT_SPECS = (".20f", ",.2f", "012,.2f", "z.2f", "#.0f", "#g", "=+10.2f", ".25e", "_.1%",
                    ".30g")
MORE_INT_SPECS = ("x", "#X", "#o", "b", "c", "_d", "010_x", "=+8d", "#012_b", "08,d")
WIDE_FLOATS = [1e20, -9.3e18, 1e300, 1e-300, 5e-324, 1.7976931348623157e308, 0.1, -0.0001,
               -0.004, 2.675, 1234567.891, 123456789012345678.0, 0.5, 2.5, float("nan"),
               -float("inf")]


def test_more_float_specs_and_wide_values():
    formats = _all(MORE_FLOAT_SPECS)
    rng = np.random.default_rng(2)
    values = WIDE_FLOATS + list(10.0 ** rng.uniform(-320, 308, 60) * rng.choice([-1.0, 1.0], 60))
    for value in values:
        assert formats(value) == tuple(format(value, spec) for spec in MORE_FLOAT_SPECS), value


def test_integer_bases_characters_and_grouping():
    # "c" apart: Python refuses it beyond 0x10FFFF and for negative values (each spec costs a
    # compile, so the others are compiled once and checked on every value)
    numbers = tuple(spec for spec in MORE_INT_SPECS if spec != "c")
    formats, characters = _all(numbers), _all(("c",))
    for value in (0, 65, 255, 4660, -1, -4095, 1234567, 2 ** 62):
        assert formats(value) == tuple(format(value, spec) for spec in numbers), value
    for value in (0, 65, 255, 4660):
        assert characters(value) == (format(value, "c"),), value
