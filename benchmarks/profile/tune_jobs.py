"""Tune several job files in one Ray session (one start-up instead of one per `tunefleet tune`).

Usage: python benchmarks/profile/tune_jobs.py JOB.yaml [JOB.yaml ...] -- [tune options]
Each file runs as `tunefleet tune FILE [tune options]` in this process; Ray starts once. Exits with
the first failing job's status after trying them all.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from orchestrator.cli import main as cli_main
    from orchestrator.dispatch import ensure_ray

    files, extra = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    if not files:
        print("give at least one job file", file=sys.stderr)
        return 2
    ensure_ray(None)
    status = 0
    for file in files:
        print(f"== tune {file}", flush=True)
        try:
            cli_main(["tune", file, *extra])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
            status = status or code
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
