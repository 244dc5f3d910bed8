"""Run the benchmarks: ``python -m tests.benchmarks [NAME ...]`` (all ``bench_*.py`` by default)."""

import importlib
import pkgutil
import sys
from pathlib import Path


def main(argv):
    here = Path(__file__).parent
    names = sorted(m.name[len("bench_"):] for m in pkgutil.iter_modules([str(here)])
                   if m.name.startswith("bench_"))
    chosen = argv or names
    unknown = [n for n in chosen if n not in names]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; available: {names}", file=sys.stderr)
        return 2
    for name in chosen:
        print(f"== {name}", flush=True)
        importlib.import_module(f"tests.benchmarks.bench_{name}").main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
