"""autodiff-ast: source-to-source automatic differentiation for Python and NumPy.

JAX's transformations, written as readable Python source instead of traced graphs::

    >>> import numpy as np
    >>> import autodiff_ast as ad
    >>> df = ad.grad(lambda x: np.sum(np.tanh(x)))
    >>> df(np.zeros(2))
    array([1., 1.])

Importing the package is cheap: each public name is imported from its module on first use
(``ad.vmap`` imports :mod:`autodiff_ast.batching`), so a process that only calls
``jit(grad(f))`` with a warm cache never loads the code of the other transformations.
"""

import importlib as _importlib
import sys as _sys
import types as _types

from .config import config
from .errors import (
    ArgnumsError,
    ArgumentError,
    AutodiffError,
    CompileError,
    MissingRuleError,
    NonFloatInputError,
    NonFloatOutputError,
    NonScalarOutputError,
    ShapeMismatchError,
    SourceUnavailableError,
    StaticArgumentError,
    TypeInferenceError,
    UnsupportedError,
    UnsupportedSyntaxError,
)

__version__ = "0.1.0"

#: Public name -> the module that defines it (imported on first access).
_LAZY = {
    "grad": "api", "value_and_grad": "api", "vjp": "api", "source": "api",
    "vmap": "batching", "BatchingError": "batching",
    "checkpoint": "checkpointing",
    "check_grads": "checks",
    "all_gather": "collectives", "axis_index": "collectives", "pmax": "collectives",
    "pmean": "collectives", "pmin": "collectives", "psum": "collectives",
    "RuleCheckError": "custom", "custom_jvp": "custom", "custom_vjp": "custom",
    "register_rule": "custom", "unregister_rule": "custom",
    "explain": "debug",
    "show": "display",
    "hessian": "jacobians", "jacfwd": "jacobians", "jacrev": "jacobians", "jvp": "jacobians",
    "jvp_transform": "jacobians", "linearize": "jacobians",
    "jit": "jit", "config": "config",
    "PmapError": "pmap", "pmap": "pmap",
    "register_pytree_node": "pytrees", "tree_flatten": "pytrees", "tree_leaves": "pytrees",
    "tree_map": "pytrees", "tree_structure": "pytrees", "tree_unflatten": "pytrees",
}

__all__ = [
    "grad", "value_and_grad", "vjp", "source", "check_grads", "checkpoint", "config",
    "show", "explain",
    "vmap", "BatchingError",
    "psum", "pmean", "pmax", "pmin", "all_gather", "axis_index", "pmap", "PmapError",
    "jvp", "jvp_transform", "linearize", "jacfwd", "jacrev", "hessian", "jit", "CompileError",
    "custom_jvp", "custom_vjp", "register_rule", "unregister_rule", "RuleCheckError",
    "AutodiffError", "ArgnumsError", "MissingRuleError", "NonFloatInputError",
    "NonFloatOutputError", "NonScalarOutputError", "SourceUnavailableError",
    "UnsupportedSyntaxError", "UnsupportedError", "ShapeMismatchError", "TypeInferenceError",
    "ArgumentError", "StaticArgumentError",
    "register_pytree_node", "tree_flatten", "tree_unflatten", "tree_map", "tree_leaves",
    "tree_structure",
]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _Package(_types.ModuleType):
    """The package's module type: ``autodiff_ast.jit`` and ``autodiff_ast.pmap`` stay the
    public functions when their modules are imported (the import system would otherwise set
    the package attribute to the submodule), as they were when everything was imported here."""

    def __setattr__(self, name, value):
        if isinstance(value, _types.ModuleType) and _LAZY.get(name) == name:
            value = getattr(value, name)
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
