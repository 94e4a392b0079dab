"""Run every benchmark module and write BENCHMARKS.md (``make bench``).

Each ``benchmarks/*.py`` module (except this one, timing.py, ``*_src.py`` and files starting
with ``_``) that defines ``run()`` returning a list of dicts ``{name, ours_s, competitors:
{name: seconds}, notes}`` is imported and run, one after another in this one process, so
every number in the report was measured side by side on the same machine in the same session.
The report records the machine (CPU model, cores, memory), the library versions, the command,
each module's table of times and the ratio of each competitor's time to ours (above 1: ours is
faster). Run a subset with ``--only`` and write it elsewhere with ``--out`` (a partial run
should not overwrite BENCHMARKS.md).

Usage::

    python benchmarks/run.py [--only seed_workloads,vmap] [--out BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import math
import os
import platform
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Before anything imports numpy/numba/jax: keep caches inside the project and JAX on the CPU.
os.environ.setdefault("AUTODIFF_AST_CACHE", os.path.join(ROOT, ".cache", "bench", "modules"))
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(ROOT, ".cache", "bench", "numba"))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# BLAS keeps its default threads (one per core), as a user's process does: JAX's XLA runs
# its matrix products on threads of its own, so one BLAS thread put every BLAS-based entry
# (ours, hand-written NumPy, autograd) at a disadvantage against it (MLP 784-128-128-10 at
# batch 1024 on 2 cores: ours 10.5 ms with one BLAS thread, 5.8 ms with two; JAX 5.7 ms,
# 8.4 ms pinned to one core). The stall a prange once suffered right after a BLAS call
# (numba-notes.md, "Parallel CPU") is gone with the workqueue threading layer jit selects
# (docs/numba.md); set OPENBLAS_NUM_THREADS yourself to measure otherwise (it is recorded).
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from timing import fmt as fmt_time  # noqa: E402 (benchmarks/timing.py: one duration format)

_VERSIONED = ("numpy", "scipy", "numba", "llvmlite", "gast", "jax", "jaxlib", "autograd",
              "tangent")
_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS",
        "NUMBA_THREADING_LAYER", "JAX_PLATFORMS", "XLA_FLAGS",
        "PYTHONDONTWRITEBYTECODE")  # set: every start compiles the modules pip left no .pyc
# for (this editable package's) from source: part of the start-up rows' times


# Shared code, not benchmarks: this driver, the timing helpers; *_src.py hold user functions.
_HELPERS = ("run", "timing")


def discover(only=None):
    """Paths of the benchmark modules, sorted by name (optionally only the named ones)."""
    names = []
    for filename in sorted(os.listdir(HERE)):
        stem, ext = os.path.splitext(filename)
        if ext != ".py" or stem in _HELPERS or stem.startswith("_") or stem.endswith("_src"):
            continue
        if only and stem not in only:
            continue
        names.append(os.path.join(HERE, filename))
    return names


def load(path):
    """Import a benchmark module from its file."""
    stem = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(f"benchmarks_{stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def machine():
    """CPU model, logical cores and memory, read from /proc where available."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory = "unknown"
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("MemTotal"):
                    memory = f"{int(line.split()[1]) / 1024 ** 2:.1f} GiB"
                    break
    except OSError:
        pass
    return {"CPU": cpu, "logical cores": str(os.cpu_count()), "memory": memory,
            "OS": f"{platform.system()} {platform.release()}"}


def versions():
    """Python and library versions ('not installed' for absent optional ones)."""
    out = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def ratio(competitor, ours):
    """Competitor time over ours ('2.0x' means ours is twice as fast).

    >>> ratio(2.0, 1.0), ratio(1.0, 4.0)
    ('2.00x', '0.25x')
    """
    if not ours or math.isnan(ours) or competitor is None or math.isnan(competitor):
        return "n/a"
    return f"{competitor / ours:.2f}x"


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(rows):
    """A Markdown table of one module's rows: ours, then each competitor with its ratio."""
    lines = ["| workload | ours | competitor | time | competitor / ours |",
             "| --- | ---: | --- | ---: | ---: |"]
    notes = []
    for k, row in enumerate(rows, start=1):
        competitors = list(row.get("competitors", {}).items()) or [("(none)", None)]
        for i, (label, seconds) in enumerate(competitors):
            first = i == 0
            name = f"{_cell(row['name'])} [{k}]" if first else ""
            ours = fmt_time(row.get("ours_s")) if first else ""
            lines.append(f"| {name} | {ours} | {_cell(label)} | {fmt_time(seconds)} | "
                         f"{ratio(seconds, row.get('ours_s'))} |")
        if row.get("notes"):
            notes.append(f"[{k}] {_cell(row['notes'])}")
    return "\n".join(lines + [""] + notes)


def report(results, command, started, elapsed):
    """The text of BENCHMARKS.md."""
    out = ["# Benchmarks", "",
           f"Written by `benchmarks/run.py` on {started:%Y-%m-%d %H:%M} UTC in {elapsed:.0f} s. "
           f"Command: `{command}`.", "",
           "Every number below was measured in this one run, side by side. Times are per call "
           "on warm caches (compilation is done before timing and reported in the notes); "
           "\"competitor / ours\" above 1 means ours is faster. Regenerate with `make bench`; "
           "do not edit by hand.", "", "## Machine", ""]
    out += [f"- {k}: {v}" for k, v in machine().items()]
    out += ["", "## Versions", ""]
    out += [f"- {k}: {v}" for k, v in versions().items()]
    env = {k: os.environ[k] for k in _ENV if k in os.environ}
    out += ["", "## Environment", ""]
    out += [f"- {k}={v}" for k, v in env.items()] or ["- (no thread or platform variables set)"]
    for name, (doc, rows, error) in results.items():
        out += ["", f"## {name}", ""]
        if doc:
            out += [doc.strip().split("\n\n")[0].replace("\n", " "), ""]
        if error:
            out += ["```", error.strip(), "```"]
        if rows:
            out.append(table(rows))
    return "\n".join(out) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated module names (default: all)")
    parser.add_argument("--out", default=os.path.join(ROOT, "BENCHMARKS.md"))
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    command = "make bench" if os.environ.get("MAKELEVEL") else \
        "python " + " ".join([os.path.relpath(__file__, ROOT)] + (argv or sys.argv[1:]))
    started = datetime.datetime.now(datetime.timezone.utc)
    begin = time.perf_counter()
    results = {}
    for path in discover(only):
        stem = os.path.splitext(os.path.basename(path))[0]
        print(f"== {stem}", flush=True)
        doc, rows, error = None, [], None
        try:
            module = load(path)
            doc = module.__doc__
            if not hasattr(module, "run"):
                print("   (no run(): skipped)")
                continue
            rows = list(module.run())
        except Exception:  # noqa: BLE001 (report the failure, keep the other modules)
            error = traceback.format_exc(limit=3)
            print(error, file=sys.stderr)
        for row in rows:
            print(f"   {row['name']}: ours {fmt_time(row.get('ours_s'))}; " + ", ".join(
                f"{k} {fmt_time(v)}" for k, v in row.get("competitors", {}).items()),
                flush=True)
        results[stem] = (doc, rows, error)
    text = report(results, command, started, time.perf_counter() - begin)
    with open(args.out, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(f"wrote {args.out}")
    return 0 if all(not error for _, _, error in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
