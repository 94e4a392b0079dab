"""Load generated Python source as a real module backed by a file on disk.

Generated code must behave like code the user wrote: ``inspect.getsource`` must find it,
tracebacks and ``pdb`` must show its lines, and ``numba.njit(cache=True)`` must be able to
cache it (Numba refuses pseudo-filenames such as ``<string>``). So :func:`load_source`
writes the source to a content-hashed file ``<cache dir>/<module_name>_<sha256[:16]>.py``,
compiles it with that real filename, and registers the module in ``sys.modules`` as
``autodiff_ast_generated.<module_name>_<sha256[:16]>``.

Files are written atomically: the source goes to a temporary file in the same directory,
which is then hard-linked into place (create-if-absent, so a file another process already
wrote is never replaced and its modification time, which Numba's cache checks, stays put)
or, where hard links are unavailable or an existing file is corrupt, moved over it with
``os.replace``. Several processes can load the same source at once.

An index lets a later process find a module without writing its source again:
:func:`write_index` records, under a key the caller computes from everything the module was
generated from, the module's file and the sha256 of its text; :func:`read_indexed` returns that
text only if the file still holds exactly it (a missing, truncated or changed file reads as no
entry, so the caller generates the module again and writes a new entry).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import json
import linecache
import os
import sys
import tempfile
import threading
import types
from pathlib import Path

__all__ = ["PACKAGE", "cache_dir", "load_source", "module_path", "read_index", "read_indexed",
           "write_index"]

#: Parent name under which generated modules are registered in ``sys.modules``.
PACKAGE = "autodiff_ast_generated"

_ENV_VAR = "AUTODIFF_AST_CACHE"
_HASH_CHARS = 16

_lock = threading.RLock()
_loaded: dict[str, types.ModuleType] = {}


def _default_cache_dir() -> Path:
    configured = os.environ.get(_ENV_VAR)
    if configured:
        return Path(os.path.abspath(os.path.expanduser(configured)))
    return Path.home() / ".cache" / "autodiff_ast" / "modules"


def cache_dir() -> Path:
    """The directory where generated modules are written by default.

    ``$AUTODIFF_AST_CACHE`` if set (made absolute), else ``~/.cache/autodiff_ast/modules``.
    The directory is created on first use, not by this function.

    >>> path = cache_dir()
    >>> path.is_absolute()
    True
    """
    return _default_cache_dir()


def _check_module_name(module_name: str) -> None:
    if not isinstance(module_name, str) or not module_name.isidentifier():
        raise ValueError(
            f"module_name must be a Python identifier (it names a file and a module), "
            f"got {module_name!r}"
        )


def _stem(data: bytes, module_name: str) -> str:
    return f"{module_name}_{hashlib.sha256(data).hexdigest()[:_HASH_CHARS]}"


def _directory(directory: str | os.PathLike[str] | None) -> Path:
    if directory is None:
        return _default_cache_dir()
    return Path(os.path.abspath(os.fspath(directory)))


def module_path(
    source: str, module_name: str, *, cache_dir: str | os.PathLike[str] | None = None
) -> Path:
    """The file :func:`load_source` uses for ``source``; nothing is written or imported.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = module_path("x = 1\\n", "demo", cache_dir=tmp)
    ...     path.parent == Path(tmp).absolute(), path.name
    (True, 'demo_9e26bf369911c45c.py')
    """
    _check_module_name(module_name)
    return _directory(cache_dir) / f"{_stem(source.encode('utf-8'), module_name)}.py"


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _write_file(path: Path, data: bytes) -> None:
    """Make ``path`` hold exactly ``data``, atomically, leaving a correct file untouched."""
    if _read_or_none(path) == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp_name, 0o644)
        try:
            # Atomic create-if-absent: readers see either no file or the whole file.
            os.link(tmp_name, path)
        except FileExistsError:
            # Another process got there first; keep its file unless it is wrong.
            if _read_or_none(path) != data:
                os.replace(tmp_name, path)
        except OSError:
            # No hard links on this filesystem: fall back to an atomic rename.
            os.replace(tmp_name, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
    # A stale copy of an older (corrupt) file may be in linecache; drop it.
    linecache.checkcache(str(path))


def _parent_package() -> types.ModuleType:
    package = sys.modules.get(PACKAGE)
    if package is None:
        # A bare namespace parent, so that "autodiff_ast_generated.x" can be imported by
        # name (pickle, numba) once x has been loaded here.
        package = types.ModuleType(PACKAGE, "Modules written by autodiff_ast.")
        package.__path__ = []
        package.__spec__ = importlib.machinery.ModuleSpec(PACKAGE, None, is_package=True)
        sys.modules[PACKAGE] = package
    return package


def load_source(
    source: str, module_name: str, *, cache_dir: str | os.PathLike[str] | None = None
) -> types.ModuleType:
    """Write ``source`` to a content-hashed file and import it as a registered module.

    The file is ``<cache_dir>/<module_name>_<sha256[:16]>.py`` (``cache_dir`` defaults to
    :func:`cache_dir`); the module is ``sys.modules["autodiff_ast_generated.<file stem>"]``.
    Loading the same source under the same name again in this process returns the same
    module object, without touching the disk. An exception raised while the module body runs
    propagates, and the module is not registered.

    >>> import inspect, tempfile
    >>> source = "def square(x):\\n    return x * x\\n"
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     module = load_source(source, "doc_square", cache_dir=tmp)
    ...     print(module.square(3), inspect.getsource(module.square), end="")
    ...     load_source(source, "doc_square", cache_dir=tmp) is module
    9 def square(x):
        return x * x
    True
    >>> module.__name__
    'autodiff_ast_generated.doc_square_e4406709fbceb341'
    """
    _check_module_name(module_name)
    data = source.encode("utf-8")
    stem = _stem(data, module_name)
    qualified = f"{PACKAGE}.{stem}"
    with _lock:
        module = _loaded.get(qualified)
        if module is not None:
            return module
        path = _directory(cache_dir) / f"{stem}.py"
        _write_file(path, data)
        # Compile the bytes we hashed rather than re-reading the file: what runs is exactly
        # what was asked for, and no .pyc is written or trusted.
        code = compile(data, str(path), "exec", dont_inherit=True)
        spec = importlib.util.spec_from_file_location(qualified, path)
        module = importlib.util.module_from_spec(spec)
        package = _parent_package()
        sys.modules[qualified] = module
        try:
            exec(code, module.__dict__)
        except BaseException:
            sys.modules.pop(qualified, None)
            raise
        setattr(package, stem, module)
        _loaded[qualified] = module
        return module


# ---------------------------------------------------------------- the index
_KEY_CHARS = frozenset("0123456789abcdef")


def _index_path(key: str, directory: str | os.PathLike[str] | None) -> Path:
    if not (isinstance(key, str) and 16 <= len(key) <= 128 and set(key) <= _KEY_CHARS):
        raise ValueError(f"an index key is a lowercase hex digest, got {key!r}")
    return _directory(directory) / "index" / f"{key}.json"


def write_index(
    key: str, source: str, module_name: str, record: dict, *,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Record that `key` stands for the module :func:`load_source` writes for ``source`` under
    ``module_name``, with `record` (JSON data) kept beside it; returns the index file.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     module = load_source("y = 2\\n", "doc_indexed", cache_dir=tmp)
    ...     _ = write_index("ab" * 16, "y = 2\\n", "doc_indexed", {"entry": "y"}, cache_dir=tmp)
    ...     read_indexed("ab" * 16, cache_dir=tmp)
    ('y = 2\\n', 'doc_indexed', {'entry': 'y'})
    """
    _check_module_name(module_name)
    path = _index_path(key, cache_dir)
    entry = {"module": module_name, "file": module_path(source, module_name).name,
             "sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(), "record": record}
    _write_file(path, json.dumps(entry, indent=1, sort_keys=True).encode("utf-8"))
    return path


def read_index(
    key: str, *, cache_dir: str | os.PathLike[str] | None = None
) -> dict | None:
    """The raw index entry for `key` (None when there is none or it cannot be read)."""
    path = _index_path(key, cache_dir)
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_indexed(
    key: str, *, cache_dir: str | os.PathLike[str] | None = None
) -> tuple[str, str, dict] | None:
    """``(source, module_name, record)`` indexed under `key`, or None.

    None when there is no entry, the entry is malformed, or the module file no longer holds
    the text the entry was written for (sha256 checked): the caller then builds the module
    again and its new entry replaces this one.
    """
    entry = read_index(key, cache_dir=cache_dir)
    if entry is None:
        return None
    name, file, digest, record = (entry.get(k) for k in ("module", "file", "sha256", "record"))
    if not (isinstance(name, str) and name.isidentifier() and isinstance(file, str)
            and isinstance(digest, str) and isinstance(record, dict)):
        return None
    if os.path.basename(file) != file or not file.startswith(f"{name}_"):
        return None
    data = _read_or_none(_directory(cache_dir) / file)
    if data is None or hashlib.sha256(data).hexdigest() != digest:
        return None
    if _stem(data, name) + ".py" != file:
        return None
    try:
        return data.decode("utf-8"), name, record
    except UnicodeDecodeError:
        return None
