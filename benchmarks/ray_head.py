"""What Ray itself costs per trial: the real ``WorkerPool`` over replay actors on a local Ray
cluster of ``--nodes`` raylets (``ray.cluster_utils.Cluster``), answered at once, so Ray's calls
alone set the pace.

    python3 benchmarks/ray_head.py --nodes 1 4 --actors 32 --seconds 20 --out DIR

Per run: ``--actors`` replay actors (one recorded H200 matmul landscape; the actors take no CPU
resource, so they spread over the nodes as Ray places them), each kept ``--in-flight`` calls
deep by one driver loop (submit into free slots, ``wait``); after ``--warmup-s`` the loop counts
finished trials for ``--seconds``. From /proc, the CPU seconds each process spent in that window:
the driver, the actors, the raylets, and the GCS (the head). Writes DIR/ray_head.json, prints a
table: trials/s, and per trial the CPU microseconds of each part.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LANDSCAPE = (
    ROOT / "benchmarks" / "landscapes" / "h200" / "matmul_M128_N4096_K4096_dtypebfloat16.json.gz"
)
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def _role(pid: int) -> str | None:
    """``gcs``, ``raylet``, ``actor`` or ``other`` (Ray's agents and monitors) for Ray's
    processes, else None."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None
    if "gcs_server" in cmd:
        return "gcs"
    if "/raylet" in cmd.split(" ")[0]:
        return "raylet"
    if "TrialWorker" in cmd or "ray::" in cmd:
        return "actor"
    if "ray/_private" in cmd or "ray/dashboard" in cmd or "ray/autoscaler" in cmd:
        return "other"
    return None


def _cpu_by_role() -> dict[str, float]:
    """CPU seconds so far of this process and of every Ray process, by role."""
    out = {"driver": _cpu_s(os.getpid()), "gcs": 0.0, "raylet": 0.0, "actor": 0.0, "other": 0.0}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            role = _role(int(entry.name))
            if role is not None:
                out[role] += _cpu_s(int(entry.name))
    return out


def run_once(nodes: int, actors: int, in_flight: int, warmup_s: float, seconds: float) -> dict:
    """One cluster: start it, drive the pool, count and measure, tear it down."""
    import ray
    from ray.cluster_utils import Cluster

    from orchestrator.run.dispatch import WorkerPool
    from orchestrator.run.worker import PoolOptions, WorkerPlan
    from workers.trial import TrialRequest

    with gzip.open(LANDSCAPE) as f:
        landscape = json.load(f)
    requests = [
        TrialRequest(landscape["kernel"], dict(landscape["problem"]), r["config"])
        for r in landscape["results"]
    ]
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        plan = WorkerPlan("replay", replay_paths=(str(LANDSCAPE),))
        started = time.perf_counter()
        pool = WorkerPool([plan] * actors, PoolOptions(in_flight=in_flight))
        start_s = time.perf_counter() - started
        (class_key,) = pool.classes()
        sent = done = 0
        window: dict[str, Any] = {}
        t0 = time.perf_counter()
        while True:
            now = time.perf_counter()
            if not window and now - t0 >= warmup_s:
                window = {"t": now, "done": done, "cpu": _cpu_by_role()}
            if window and now - window["t"] >= seconds:
                break
            for _ in range(pool.free_slots(class_key)):
                pool.submit(class_key, requests[sent % len(requests)], sent)
                sent += 1
            done += len(pool.wait(0.05))
        elapsed = time.perf_counter() - window["t"]
        cpu = _cpu_by_role()
        trials = done - window["done"]
        pool.shutdown()
    finally:
        ray.shutdown()
        cluster.shutdown()
    return {
        "load_avg_after": os.getloadavg(),
        "nodes": nodes,
        "actors": actors,
        "in_flight": in_flight,
        "actor_start_s": round(start_s, 2),
        "trials": trials,
        "seconds": round(elapsed, 2),
        "trials_per_s": round(trials / elapsed, 1),
        "cpu_us_per_trial": {
            k: round(1e6 * (cpu[k] - window["cpu"][k]) / max(trials, 1), 1) for k in cpu
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--actors", type=int, default=32)
    parser.add_argument("--in-flight", type=int, default=2)
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [
        run_once(n, args.actors, args.in_flight, args.warmup_s, args.seconds) for n in args.nodes
    ]
    doc = {
        "argv": sys.argv,
        "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_avg": os.getloadavg(),
        "runs": runs,
    }
    (args.out / "ray_head.json").write_text(json.dumps(doc, indent=1))
    print("nodes actors trials/s  CPU us/trial: driver actors raylets gcs other")
    for r in runs:
        c = r["cpu_us_per_trial"]
        print(
            f"{r['nodes']:>5} {r['actors']:>6} {r['trials_per_s']:>8} "
            f"{c['driver']:>20} {c['actor']:>6} {c['raylet']:>7} {c['gcs']:>4} {c['other']:>5}"
        )


if __name__ == "__main__":
    main()
