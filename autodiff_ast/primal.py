"""The primal module: a user function rewritten from its core form, for ``jit(f)``.

``jit(f)`` compiles the function itself. Rather than handing Numba the user's source, we write
the primal from the core form (normalized, with static arguments folded in and pytrees
flattened, then tidied back into readable expressions), so the primal goes through the same
dialect rules as every derivative module and its helper functions become module functions too.

>>> import numpy as np
>>> from autodiff_ast.normalize import spec_of
>>> def f(x, scale):
...     y = np.tanh(x) * scale
...     return np.sum(y * y)
>>> print(build_primal(f, {"x": spec_of(np.ones(3)), "scale": spec_of(2.0)}).source.split(
...     "\\n\\n\\n")[1], end="")
def f(x, scale):
    # y = np.tanh(x) * scale
    y = np.tanh(x) * scale
    # return np.sum(y * y)
    return np.sum(y * y)
"""

from __future__ import annotations

import os

import gast

from codegen.emit import function, render_module

from .build import Generated, ModuleBuilder, _signature_line, _with_comments, prepare
from .reverse import SplitRegistry, _returned_names
from .templates import to_expr
from .tidy import tidy_block


def build_primal(fn, specs, entry_name=None, flat_dicts=False):
    """The module holding `fn` itself (and the helpers it calls) for this abstract signature.

    The entry function takes the flat leaves of the arguments (static ones folded in) and
    returns what `fn` returns (with flat_dicts=True, a dict display it returns as the tuple of
    its values: vmap's per-example loop).
    """
    info, program, core = prepare(fn, specs, flat_dicts=flat_dicts)
    body = tidy_block(core.body, keep=set(_returned_names(core)), temps=core.namer)
    returns = core.returns
    last = body[-1] if body else None
    if isinstance(returns, gast.Name) and returns.id in core.namer.temps and \
            isinstance(last, gast.Assign) and len(last.targets) == 1 and \
            isinstance(last.targets[0], gast.Name) and last.targets[0].id == returns.id:
        returns = last.value  # `return expr` rather than `tmp = expr; return tmp`
        body = body[:-1]
        ret = gast.Return(value=returns)
        gast.copy_location(ret, last)
        ret.origin = getattr(last, "origin", None)
        body.append(ret)
    body = _with_comments(body, core.info)
    entry = entry_name or core.name
    tuple_out = isinstance(returns, gast.Tuple)
    if body and isinstance(body[-1], gast.Return):
        main = function(entry, core.params, body, None)
    else:
        main = function(entry, core.params, body, to_expr(returns))
    builder = ModuleBuilder(program, SplitRegistry(program))
    builder.functions.append(main)
    builder.emitted_primals.add(core.name)
    builder.add_primals()
    imports, injected = builder.imports_and_data()
    doc = (f"{info.name}, rewritten by autodiff-ast from {os.path.basename(info.filename)} for "
           f"compilation.\n\n{_signature_line(info, specs)}.\nRegenerate instead of editing.\n")
    source = render_module(doc, imports, [], builder.functions)
    return Generated(source, entry, injected, {"tuple_out": tuple_out})


__all__ = ["build_primal"]
