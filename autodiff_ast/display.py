"""Showing generated code: syntax highlighting, and your function beside its derivative.

:func:`show` renders a transformed function's generated module next to the function it was
written from: in a terminal as two columns (each generated line carries the number of your line
it comes from, from :mod:`autodiff_ast.linemap`), or as an HTML page where pointing at a line
lights up its counterparts. Highlighting uses Pygments when it is installed and plain text
otherwise (it is not a dependency).

>>> import numpy as np
>>> from autodiff_ast import grad
>>> def loss(w):
...     return np.sum(np.tanh(w) ** 2)
>>> text = show(grad(loss), np.ones(2), color=False, width=100, echo=False)
>>> print(text.splitlines()[0])
your function (<doctest autodiff_ast.display[2]>) | generated: grad(loss, argnums=0)
"""

from __future__ import annotations

import html as _html
import inspect
import linecache
import os
import sys

from . import debug
from .linemap import line_map

__all__ = ["show", "highlight", "side_by_side", "html_page", "pygments_available"]


def pygments_available():
    """Whether Pygments can be imported (highlighting is plain text without it)."""
    try:
        import pygments  # noqa: F401
    except ImportError:
        return False
    return True


def _use_color(color, stream=None):
    if color is not None:
        return bool(color) and pygments_available()
    stream = stream or sys.stdout
    return pygments_available() and hasattr(stream, "isatty") and stream.isatty() and \
        os.environ.get("NO_COLOR") is None and os.environ.get("TERM") != "dumb"


def highlight(source, color=None):
    """`source` with terminal colours (Pygments) when `color` (None: when stdout is a
    terminal), else unchanged.

    >>> highlight("x = 1\\n", color=False)
    'x = 1\\n'
    """
    if not _use_color(color):
        return source
    from pygments import highlight as pyg_highlight
    from pygments.formatters import TerminalFormatter
    from pygments.lexers import PythonLexer
    return pyg_highlight(source, PythonLexer(), TerminalFormatter())


def _line_colors(lines, color):
    """Each line highlighted on its own (for columns: the padding is computed on plain text)."""
    if not color:
        return list(lines)
    return [highlight(line + "\n", True).rstrip("\n") for line in lines]


def _user_lines(filename, first, last):
    lines = [line.rstrip("\n") for line in linecache.getlines(filename)]
    return [(row, lines[row - 1]) for row in range(first, min(last, len(lines)) + 1)]


def _generated_body(source):
    """(row, line) of the generated functions, from the first def (docstring and imports
    left out: they do not come from your lines)."""
    lines = source.rstrip("\n").split("\n")
    start = next((k for k, line in enumerate(lines) if line.startswith(("def ", "@"))), 0)
    return [(k + 1, lines[k]) for k in range(start, len(lines))]


def side_by_side(user, generated, mapping, title=("your function", "generated"), width=None,
                 color=False):
    """Two columns of text: `user` [(row, line)] and `generated` [(row, line)], each generated
    line prefixed with the user row it comes from (`mapping`: generated row -> Origin).

    >>> print(side_by_side([(1, "def f(x):")], [(5, "def g(x):")], {}, width=40), end="")
    your function  | generated
       1 def f(x): |      def g(x):
    """
    width = width or _terminal_width()
    left_w = min(max([len(t) + 5 for _, t in user] + [len(title[0])]), max(20, width // 2))
    rows = max(len(user), len(generated))
    user_text = _line_colors([t for _, t in user], color)
    gen_text = _line_colors([t for _, t in generated], color)
    out = [f"{title[0]:<{left_w}} | {title[1]}"]
    for k in range(rows):
        if k < len(user):
            row, text = user[k]
            plain = f"{row:>4} {text}"
            if len(plain) > left_w:
                plain = plain[:left_w - 1] + "~"
                left = plain
            else:
                left = f"{row:>4} {user_text[k]}" + " " * (left_w - len(plain))
        else:
            left = " " * left_w
        right = ""
        if k < len(generated):
            row, text = generated[k]
            origin = mapping.get(row)
            mark = f"{origin.lineno:>4}" if origin is not None else "    "
            right = f"{mark} {gen_text[k]}"
        out.append(f"{left} | {right}".rstrip())
    return "\n".join(out) + "\n"


def _terminal_width():
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 120


def html_page(user, generated, mapping, title=("your function", "generated"), heading=""):
    """A standalone HTML page: your function and the generated code in two panes; pointing at
    a line highlights the lines it corresponds to in the other pane.

    >>> page = html_page([(1, "def f(x):")], [(3, "def g(x):")], {})
    >>> page.startswith("<!DOCTYPE html>") and 'id="u1"' in page
    True
    """
    def cells(lines, side):
        out = []
        for row, text in lines:
            code = _html_line(text)
            if side == "u":
                out.append(f'<div class="ln" id="u{row}" data-u="{row}"><span class="no">{row}'
                           f"</span>{code}</div>")
            else:
                origin = mapping.get(row)
                target = origin.lineno if origin is not None else ""
                out.append(f'<div class="ln" data-u="{target}"><span class="no">{target}'
                           f"</span>{code}</div>")
        return "\n".join(out)
    style = _pygments_css()
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{_html.escape(heading or title[1])}</title>
<style>
body {{ font-family: sans-serif; margin: 1em; }}
.panes {{ display: grid; grid-template-columns: 1fr 1fr; gap: 1em; }}
.pane {{ overflow-x: auto; border: 1px solid #ccc; }}
.pane h2 {{ font-size: 1em; margin: 0; padding: .4em; background: #f0f0f0; }}
.ln {{ font-family: monospace; white-space: pre; padding: 0 .4em; }}
.no {{ display: inline-block; width: 3em; color: #999; user-select: none; }}
.ln.hot {{ background: #fff3b0; }}
{style}
</style>
</head>
<body>
<h1>{_html.escape(heading)}</h1>
<p>Point at a line: its counterpart lights up. Numbers in the right pane are the lines of your
function that each generated line comes from.</p>
<div class="panes">
<div class="pane"><h2>{_html.escape(title[0])}</h2>
{cells(user, "u")}
</div>
<div class="pane"><h2>{_html.escape(title[1])}</h2>
{cells(generated, "g")}
</div>
</div>
<script>
document.querySelectorAll(".ln").forEach(function (el) {{
  el.addEventListener("mouseenter", function () {{
    var u = el.dataset.u;
    if (!u) return;
    document.querySelectorAll('.ln[data-u="' + u + '"]').forEach(function (o) {{
      o.classList.add("hot");
    }});
  }});
  el.addEventListener("mouseleave", function () {{
    document.querySelectorAll(".ln.hot").forEach(function (o) {{ o.classList.remove("hot"); }});
  }});
}});
</script>
</body>
</html>
"""


def _html_line(text):
    if not pygments_available():
        return _html.escape(text)
    from pygments import highlight as pyg_highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer
    return pyg_highlight(text, PythonLexer(), HtmlFormatter(nowrap=True)).rstrip("\n")


def _pygments_css():
    if not pygments_available():
        return ""
    from pygments.formatters import HtmlFormatter
    return HtmlFormatter().get_style_defs(".ln")


def _transformed(f):
    """`f` itself when it was transformed by autodiff_ast, else ``grad(f)``."""
    if hasattr(f, "_modules") and hasattr(f, "kind"):
        return f
    from .api import grad
    return grad(f)


def show(f, *example_args, html=False, path=None, color=None, width=None, echo=True,
         **example_kwargs):
    """Your function and its generated derivative side by side.

    `f` is a transformed function (``grad(loss)``, ``vmap(f)``...; a plain function means
    ``grad(f)``); with example arguments the module for their signature is generated first.
    In a terminal the text is printed (and returned); ``html=True`` returns an HTML page and
    ``path="x.html"`` writes it and returns the path. `color`: None colours only a terminal.
    """
    f = _transformed(f)
    if example_args or example_kwargs:
        f(*example_args, **example_kwargs)
    if getattr(f, "_last", None) is None:
        raise TypeError("show: pass example arguments (show(f, x, y)) or call the function "
                        "once: the code is generated for the types of the arguments")
    source = f.source
    user_fn = debug.user_function_of(f)
    if user_fn is None:
        raise TypeError(f"show: cannot find the Python function under {f!r}")
    lines, first = inspect.getsourcelines(user_fn)
    filename = user_fn.__code__.co_filename
    last = first + len(lines) - 1
    mapping = line_map(source, filename, (first, last))
    user = _user_lines(filename, first, last)
    generated = _generated_body(source)
    what = source.split("\n", 1)[0].strip('"').split(", generated by")[0]
    title = (f"your function ({os.path.basename(filename)})", f"generated: {what}")
    if html or path:
        page = html_page(user, generated, mapping, title, heading=what)
        if path:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(page)
            return path
        return page
    text = side_by_side(user, generated, mapping, title, width, _use_color(color))
    if echo:
        sys.stdout.write(text)
    return text
