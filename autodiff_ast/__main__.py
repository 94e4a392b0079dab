"""``python -m autodiff_ast``: the same command line as ``autodiff-ast``."""

import sys

from .cli import main

sys.exit(main())
