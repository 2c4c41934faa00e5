"""Does the web page stay usable with 1,000 jobs and a study of 10,000 trials?

Usage (repo root): python benchmarks/page_load.py [--jobs 1000] [--trials 10000] [--rounds 20]
    [--page-rounds 5] [--out DIR] [--no-browser]

A fresh temporary SQLite database gets ``--jobs`` finished matmul jobs of team alpha (one study of
3 trials each, on two real device classes in turn) and one more job whose H200 study holds
``--trials`` trials and whose A100 study measured 200 configs including the H200 winner (so the
portability matrix has data), with best configs for both classes; the H200 best has a drift history
of 1,000 re-timings. ``tunefleet serve
--no-scheduler`` serves it on a free 127.0.0.1 port. Then:

* data: each JSON route the page calls, ``--rounds`` times (client-side, request sent to body
  read, one keep-alive connection): the jobs list's first and last page, the big job, its study's
  analysis (convergence and importance over every trial), a trial page sorted by time from the
  middle, best configs, the portability matrix, and the job page's HTML shell;
* pages: each page in headless Chromium (Debian's /usr/bin/chromium through playwright),
  ``--page-rounds`` times: navigation start to the page's data drawn (the jobs table filled, the
  job's chart and trial table drawn, the best-config table, the heat map, the drift chart and its
  regressions).

Prints one line per measurement (median, p90, max ms) and writes ``page_load.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from db import Database, JobStatus, StudyStatus, TrialOutcome, repository  # noqa: E402
from db.models import TokenScope, Trial  # noqa: E402
from db.states import RevalidationState  # noqa: E402
from search_spaces.problem import problem_key  # noqa: E402
from search_spaces.registry import get_spec  # noqa: E402
from search_spaces.space import config_key  # noqa: E402
from workers.device_table import lookup  # noqa: E402

H200 = "NVIDIA H200"
A100 = "NVIDIA A100-SXM4-80GB"
PROBLEM = {"M": 4096, "N": 4096, "K": 4096, "dtype": "float16"}
CHROMIUM = "/usr/bin/chromium"
DRIFT_QUERY = f"kernel=matmul&problem=M%3D4096%2CN%3D4096%2CK%3D4096%2Cdtype%3Dfloat16&device_class={H200.replace(' ', '%20')}"


def _trial_rows(
    kernel_id: int,
    key: str,
    class_id: int,
    job_id: int,
    study_id: int,
    configs: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    rng = random.Random(study_id)
    rows = []
    for config in configs:
        # A bowl around BLOCK_M=128 with noise, and a few failures, like a real landscape.
        spread = abs(math.log2(config["BLOCK_M"] / 128)) + abs(math.log2(config["BLOCK_N"] / 128))
        failed = rng.random() < 0.05
        rows.append(
            {
                "kernel_id": kernel_id,
                "problem_key": key,
                "device_class_id": class_id,
                "job_id": job_id,
                "study_id": study_id,
                "config": config,
                "config_key": config_key(config),
                "outcome": TrialOutcome.COMPILE_ERROR if failed else TrialOutcome.OK,
                "median_ms": None if failed else 0.3 * (1 + spread) * (1 + 0.2 * rng.random()),
                "compile_s": 1 + rng.random(),
                "error": "synthetic compile error" if failed else None,
            }
        )
    return rows


def seed_drift(
    s: Any, kernel: str, version: str, key: str, device_class: str, stored_ms: float, count: int
) -> None:
    """``count`` re-timings of the H200 best (a drift history): holding, then after a Triton
    upgrade halfway through regressed by 20% (every 50th failed)."""
    rng = random.Random(1)
    (row,) = repository.get_best(s, kernel, key, device_class, version)
    classes = repository.device_class_by_key(s, device_class)
    assert classes is not None
    envs = [
        repository.ensure_environment(s, classes.id, "d", "cuda 12.8", triton, "2.9.0")
        for triton in ("3.5.0", "3.6.0")
    ]
    start = datetime.now(timezone.utc) - timedelta(hours=count)
    for i in range(count):
        late = i >= count // 2
        failed = i % 50 == 49
        ms = None if failed else stored_ms * (1.2 if late else 1.0) * (1 + rng.gauss(0, 0.01))
        state = "failed" if failed else ("regressed" if late else "holds")
        repository.record_retiming(
            s,
            row.id,
            RevalidationState(state),
            stored_ms,
            ms,
            environment_id=envs[int(late)],
            noise=0.02,
            changed="triton 3.5.0 -> 3.6.0" if late else None,
            at=start + timedelta(hours=i),
        )


def seed(database: Database, jobs: int, trials: int, retimings: int = 1000) -> int:
    """The jobs and trials described in the module doc; returns the big job's id."""
    spec = get_spec("matmul")
    key = problem_key(spec.validate_problem(PROBLEM))
    valid = list(spec.space.iter_valid(lookup(H200).limits))
    rng = random.Random(0)
    with database.session() as s:
        kernel_id = repository.ensure_kernel(s, spec.name, spec.version_hash(), spec.space.hash())
        classes = {
            name: repository.ensure_device_class(s, name, "nvidia", name, "sm_90")
            for name in (H200, A100)
        }
        for i in range(jobs):
            name = (H200, A100)[i % 2]
            job_id = repository.create_job(
                s, kernel_id, {"kernel": "matmul", "problems": [PROBLEM], "trials": 3}, "alpha"
            )
            study_id = repository.ensure_study(
                s, job_id, kernel_id, key, PROBLEM, classes[name], "local", f"j{job_id}"
            )
            s.execute(
                sa.insert(Trial),
                _trial_rows(kernel_id, key, classes[name], job_id, study_id, rng.sample(valid, 3)),
            )
            repository.set_study_status(s, study_id, StudyStatus.DONE)
            repository.set_job_status(s, job_id, JobStatus.RUNNING)
            repository.set_job_status(s, job_id, JobStatus.DONE)
        big = repository.create_job(
            s,
            kernel_id,
            {
                "kernel": "matmul",
                "problems": [PROBLEM],
                "trials": trials,
                "device_classes": [H200, A100],
            },
            "alpha",
        )
        best: dict[str, tuple[dict[str, Any], float, int]] = {}
        for name, count in ((H200, trials), (A100, 200)):
            study_id = repository.ensure_study(
                s, big, kernel_id, key, PROBLEM, classes[name], "local", f"big-{name}"
            )
            configs = [valid[i % len(valid)] for i in range(count)]
            if name == A100:
                configs[0] = best[H200][0]
            rows = _trial_rows(kernel_id, key, classes[name], big, study_id, configs)
            s.execute(sa.insert(Trial), rows)
            fastest = min((r for r in rows if r["median_ms"]), key=lambda r: r["median_ms"])
            trial_id = s.scalar(
                sa.select(Trial.id).where(
                    Trial.study_id == study_id, Trial.config_key == fastest["config_key"]
                )
            )
            best[name] = (fastest["config"], fastest["median_ms"], trial_id or 0)
            repository.set_study_status(s, study_id, StudyStatus.DONE)
        for name, (config, ms, trial_id) in best.items():
            repository.upsert_best(
                s,
                spec.name,
                spec.version_hash(),
                key,
                classes[name],
                "3.6",
                config,
                ms,
                trial_id,
                big,
                None,
            )
        seed_drift(s, spec.name, spec.version_hash(), key, H200, best[H200][1], retimings)
        repository.set_job_status(s, big, JobStatus.RUNNING)
        repository.set_job_status(s, big, JobStatus.DONE)
    return big


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "median_ms": statistics.median(ordered),
        "p90_ms": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "max_ms": ordered[-1],
    }


def measure_data(base: str, token: str, big: int, rounds: int, jobs: int) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        study = client.get(f"/v1/jobs/{big}").json()["studies"][0]["id"]
        last = max(0, jobs + 1 - 50)
        routes = {
            "jobs list, first page": "/v1/jobs?limit=50",
            "jobs list, last page": f"/v1/jobs?limit=50&offset={last}",
            "big job detail": f"/v1/jobs/{big}",
            "study analysis (all trials)": f"/v1/jobs/{big}/studies/{study}",
            "trial page by time, middle": f"/v1/jobs/{big}/studies/{study}/trials?limit=50&offset=5000&sort=time&order=desc",
            "best configs": "/v1/best?kernel=matmul",
            "portability matrix": "/v1/portability?kernel=matmul",
            "drift, 1,000 re-timings": f"/v1/drift?{DRIFT_QUERY}",
            "job page HTML shell": f"/jobs/{big}",
        }
        out: dict[str, Any] = {}
        for label, path in routes.items():
            samples = []
            for _ in range(rounds):
                start = time.perf_counter()
                response = client.get(path)
                response.read()
                samples.append((time.perf_counter() - start) * 1000)
                response.raise_for_status()
            out[label] = {"path": path, "bytes": len(response.content), **_summary(samples)}
    return out


def measure_pages(base: str, token: str, big: int, rounds: int) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    pages = {
        "jobs": ("/", "#jobs tbody tr"),
        "job (10k-trial study)": (f"/jobs/{big}", "#chart canvas, #trials tbody tr td.num"),
        "best configs": ("/best?kernel=matmul", "#best-table tbody tr"),
        "portability": ("/portability?kernel=matmul", "#heatmap td.heat"),
        "drift (1,000 re-timings)": (
            f"/drift?{DRIFT_QUERY}",
            "#drift-chart canvas, #regressions tbody tr",
        ),
    }
    out: dict[str, Any] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.add_init_script(f"sessionStorage.setItem('tunefleet.token', {json.dumps(token)})")
        page = context.new_page()
        for label, (path, ready) in pages.items():
            samples = []
            for _ in range(rounds):
                start = time.perf_counter()
                page.goto(base + path)
                for selector in ready.split(", "):
                    page.wait_for_selector(selector, timeout=60_000)
                samples.append((time.perf_counter() - start) * 1000)
            out[label] = {"path": path, **_summary(samples)}
        browser.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--page-rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/page.db"
        database = Database(url)
        database.ensure_schema()
        start = time.perf_counter()
        big = seed(database, args.jobs, args.trials)
        seeded_s = time.perf_counter() - start
        with database.session() as s:
            _, token = repository.create_token(s, "alpha", TokenScope.READ)
        port = _port()
        cli = [sys.executable, "-c", "from orchestrator.commands.cli import main; main()"]
        server = subprocess.Popen(
            [*cli, "serve", "--no-scheduler", "--port", str(port), "--db", url],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    print("error: the server did not start", file=sys.stderr)
                    return 1
                time.sleep(0.2)
            result: dict[str, Any] = {
                "jobs": args.jobs + 1,
                "trials_in_study": args.trials,
                "seed_s": round(seeded_s, 2),
                "data": measure_data(base, token, big, args.rounds, args.jobs),
            }
            if not args.no_browser:
                result["pages"] = measure_pages(base, token, big, args.page_rounds)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
    print(f"{result['jobs']} jobs, {args.trials} trials in one study (seeded in {seeded_s:.1f} s)")
    for kind in ("data", "pages"):
        for label, row in result.get(kind, {}).items():
            print(
                f"{kind:5} {label:32} median {row['median_ms']:8.1f} ms  p90 {row['p90_ms']:8.1f} ms"
                f"  max {row['max_ms']:8.1f} ms" + (f"  {row['bytes']} B" if "bytes" in row else "")
            )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "page_load.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
