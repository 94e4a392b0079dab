"""autodiff-ast: source-to-source automatic differentiation for Python and NumPy.

JAX's transformations, written as readable Python source instead of traced graphs::

    >>> import numpy as np
    >>> import autodiff_ast as ad
    >>> df = ad.grad(lambda x: np.sum(np.tanh(x)))
    >>> df(np.zeros(2))
    array([1., 1.])
"""

from .api import grad, source, value_and_grad, vjp
from .batching import BatchingError, vmap
from .checkpointing import checkpoint
from .checks import check_grads
from .collectives import all_gather, axis_index, pmax, pmean, pmin, psum
from .config import config
from .custom import RuleCheckError, custom_jvp, custom_vjp, register_rule, unregister_rule
from .debug import explain
from .display import show
from .errors import (
    ArgnumsError,
    AutodiffError,
    CompileError,
    MissingRuleError,
    NonFloatInputError,
    NonScalarOutputError,
    ShapeMismatchError,
    SourceUnavailableError,
    TypeInferenceError,
    UnsupportedError,
    UnsupportedSyntaxError,
)
from .jacobians import hessian, jacfwd, jacrev, jvp, jvp_transform, linearize
from .jit import jit
from .pmap import PmapError, pmap
from .pytrees import (
    register_pytree_node,
    tree_flatten,
    tree_leaves,
    tree_map,
    tree_structure,
    tree_unflatten,
)

__version__ = "0.1.0"

__all__ = [
    "grad", "value_and_grad", "vjp", "source", "check_grads", "checkpoint", "config",
    "show", "explain",
    "vmap", "BatchingError",
    "psum", "pmean", "pmax", "pmin", "all_gather", "axis_index", "pmap", "PmapError",
    "jvp", "jvp_transform", "linearize", "jacfwd", "jacrev", "hessian", "jit", "CompileError",
    "custom_jvp", "custom_vjp", "register_rule", "unregister_rule", "RuleCheckError",
    "AutodiffError", "ArgnumsError", "MissingRuleError", "NonFloatInputError",
    "NonScalarOutputError", "SourceUnavailableError", "UnsupportedSyntaxError",
    "UnsupportedError", "ShapeMismatchError", "TypeInferenceError",
    "register_pytree_node", "tree_flatten", "tree_unflatten", "tree_map", "tree_leaves",
    "tree_structure",
]
