"""Pull every swappable kernel's bundles, both objectives, into one bundle per kernel.

Usage: python benchmarks/deployment/pull.py OUT DB

`tunefleet pull` writes the kernel-objective bundles to ``OUT/kernel`` and the graph-objective ones
to ``OUT/graph`` (each merged with what an earlier pull left there; a kernel with no tuned job of
an objective prints pull's error and goes on). Then ``OUT/NAME.json`` is, per kernel, device class
and Triton minor, the kernel-objective bundle with the graph-objective one's entries merged in
(per problem the newer measurement, orchestrator.export.merge; the header is the kernel one's), so
``profile --with-bundle OUT``, which reads one bundle per kernel, finds every phase's tuned
problems whichever objective its job had. Prints the files written; exit 2 on bad input.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

KERNELS = ("matmul", "rmsnorm", "flash_attention", "paged_attention", "fused_moe")
OBJECTIVES = ("kernel", "graph")


def combined(out: Path) -> list[tuple[str, str]]:
    """(name, text) per bundle name of ``out/kernel`` and ``out/graph`` (a graph file's name less
    its ``-graph``): the kernel-objective document with the graph one merged in."""
    from orchestrator.export.merge import merge_documents

    docs: dict[str, dict[str, dict]] = {}
    for objective in OBJECTIVES:
        for path in sorted((out / objective).glob("*.json")):
            name = path.name.replace("-graph.json", ".json")
            docs.setdefault(name, {})[objective] = json.loads(path.read_text())
    files = []
    for name, by in sorted(docs.items()):
        if len(by) == 2:
            doc, _ = merge_documents(by["graph"], by["kernel"])
        else:
            (doc,) = by.values()
        files.append((name, json.dumps(doc, indent=1) + "\n"))
    return files


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("error: usage: pull.py OUT DB", file=sys.stderr)
        return 2
    from orchestrator.commands.cli import main as cli
    from orchestrator.export.merge import write_atomically

    out, db = Path(argv[0]), argv[1]
    for kernel in KERNELS:
        for objective in OBJECTIVES:
            args = ["pull", kernel, "--out", str(out / objective), "--db", db]
            with contextlib.suppress(SystemExit):
                cli([*args, "--objective", objective])
    for path in write_atomically(combined(out), out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
