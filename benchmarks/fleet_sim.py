"""A simulated fleet behind real ``tunefleet serve`` processes on PostgreSQL: how many trials per
second the whole path sustains, how busy the GPUs stay, how fair the queue is, how fast the API
answers meanwhile.

    nice python3 benchmarks/fleet_sim.py --workers 1000 --servers 2 --teams 4 \
        --out benchmarks/results/fleet_sim/2026-12-01-cpu

Real: the HTTP API (``create_app`` under uvicorn, bearer tokens), the scheduler (claims under
leases, one driver thread per job, per-class pools), the study loop and the driver, every database
write (a fresh PostgreSQL schema, dropped at the end unless ``--keep``). Simulated
(benchmarks/fleet/sim_pool.py): the GPUs and the cluster: ``--workers`` workers over ``--nodes``
nodes and ``--classes`` device classes (the recorded H200 landscapes relabelled as each class),
each trial keeping its worker busy for ``(overhead + 30 launches x recorded time) x scale``.

Schedule: ``--teams`` teams with equal load; ``--burst`` jobs per team at the start, then one job
per team every ``--every-s`` seconds until ``--duration-s``; then the servers get SIGTERM (drivers
stop, trials in flight are recorded). Each round of jobs (one per team) asks for the next
``--classes-per-job`` classes in turn, so a class has work only while its rounds' jobs run: the
offered load, not the path, can set the rate (the report's busy share while a class had a job
says which). A reader polls the API (job lists, job detail, best configs, device classes)
throughout. Results: the trial rate (per second, from the trial rows; of it the ``reused`` rows,
answered from another job's measurement), claim durations (timed inside the servers), queue
wait by team (``started_at - created_at``), the busy share of the simulated workers (of all, and
while their class had a job running), API latency p50/p99 by route, database rows and bytes, and the
CPU seconds of each component in the steady window (each server and its threads by role, each
server's PostgreSQL backends, the clients, the rest of the machine, and the time the hypervisor
gave other guests (steal): benchmarks/fleet/cpu_meter.py)
as cores and as ms per trial, and how fast the machine ran Python meanwhile (benchmarks/fleet/speed.py:
the same work's CPU time before and during the run; compare runs by it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.fleet.cpu_meter import (  # noqa: E402
    CpuMeter,
    machine_cpu_s,
    stat_cpu_s,
    window,
)
from benchmarks.fleet.pg_schema import fresh_schema  # noqa: E402
from benchmarks.fleet.sim_pool import (  # noqa: E402
    busy_share,
    landscape_problems,
    wanted_busy_share,
)
from benchmarks.fleet.speed import SpeedProbe, idle_us  # noqa: E402
from db import Database, repository  # noqa: E402

LANDSCAPES = sorted((ROOT / "benchmarks" / "landscapes" / "h200").glob("matmul_*.json.gz"))
#: Class labels, in the order ``--classes`` takes them: six named ones, then numbered ones (every
#: class answers with the recorded H200 times). More classes give a schedule more (problem,
#: class) keys, so that its jobs measure instead of reusing one another's trials.
CLASSES = ("H100", "A100", "B200", "L40S", "MI300X", "H200", *(f"G{i}" for i in range(7, 49)))


def steady_series(per_second: Sequence[tuple[Any, int]], start: float, end: float) -> list[int]:
    """Trials written in each whole second ``s`` with ``start <= s < end``, from (second,
    count) rows that name only the seconds with a trial: the seconds without one count 0 (long
    trials finish in waves, and a mean over the seconds with rows alone overstates the rate)."""
    counts = {int(float(s)): int(c) for s, c in per_second}
    return [counts.get(s, 0) for s in range(math.ceil(start), math.ceil(end))]


def phases(
    trials: Sequence[int],
    running: Sequence[int],
    cpu: list[Any],
    first: float,
    phase_s: int,
) -> list[dict[str, Any]]:
    """The steady window in spans of ``phase_s`` seconds: trials/s, jobs running (mean over the
    span's seconds), and the machine's and the servers' CPU (cores, ms per trial) from the
    meter's samples ``cpu``, whose clock reads ``first`` at the start of ``trials[0]``'s second.
    Shows whether a long run's rate holds as jobs pile up, and what each trial costs meanwhile."""
    out = []
    for i in range(0, len(trials), phase_s):
        span = trials[i : i + phase_s]
        seconds, used = window(cpu, first + i, first + i + len(span))
        n = max(1, sum(span))
        servers = sum(v for k, v in used.items() if k.startswith("server") and " " not in k)
        busy = used.get("machine busy", 0.0)
        out.append(
            {
                "from_s": i,
                "seconds": len(span),
                "trials_per_s": round(sum(span) / len(span), 1),
                "jobs_running": round(sum(running[i : i + phase_s]) / len(span), 1),
                "machine_cores": round(busy / max(seconds, 1e-9), 2),
                "machine_ms_per_trial": round(1e3 * busy / n, 3),
                "servers_ms_per_trial": round(1e3 * servers / n, 3),
            }
        )
    return out


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999) - 1))], 3)


class Recorder:
    """API call latencies by route (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)

    def call(self, client: httpx.Client, route: str, method: str, url: str, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            response = client.request(method, url, **kw)
        except httpx.HTTPError:
            with self.lock:
                self.errors[route] += 1
            return None
        ms = (time.perf_counter() - t0) * 1e3
        with self.lock:
            self.calls[route].append(ms)
            if response.status_code >= 400:
                self.errors[route] += 1
        return response if response.status_code < 400 else None


def _start_servers(args: argparse.Namespace, url: str, out: Path) -> list[dict[str, Any]]:
    servers: list[dict[str, Any]] = []
    labels = list(CLASSES[: args.classes])
    for i in range(args.servers):
        # Each server holds every class's workers in equal shares (a job of a class may run on
        # either), its own slice of the nodes.
        port_file = out / f"server{i}.port"
        port_file.unlink(missing_ok=True)
        (out / f"server{i}.stats.json").unlink(missing_ok=True)
        # Named so that the CPU meter finds the server's PostgreSQL backends.
        named = sa.make_url(url).update_query_dict({"application_name": f"fleet-server{i}"})
        cmd = [
            "nice", "-n", "10", sys.executable, str(ROOT / "benchmarks" / "fleet" / "serve_sim.py"),
            "--db", named.render_as_string(hide_password=False), "--port-file", str(port_file),
            "--workers", str(args.workers // args.servers), "--classes", ",".join(labels),
            "--nodes", str(max(1, args.nodes // args.servers)), "--slots", str(args.slots),
            "--overhead-s", str(args.overhead_s), "--scale", str(args.scale),
            "--owner", f"sim-server-{i}", "--stats", str(out / f"server{i}.stats.json"),
            "--jobs-per-class", str(args.jobs_per_class),
            *(["--max-jobs", str(args.max_jobs)] if args.max_jobs else []),
            *(["--landscape-space"] if args.landscape_space else []),
        ]  # fmt: skip
        log = open(out / f"server{i}.log", "w")  # noqa: SIM115 - closed after the process ends
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        servers.append({"proc": proc, "port_file": port_file, "log": log})
    deadline = time.monotonic() + 180
    for s in servers:
        while not s["port_file"].exists():
            if s["proc"].poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"a server did not start; see {s['log'].name}")
            time.sleep(0.2)
        s["url"] = f"http://127.0.0.1:{s['port_file'].read_text().strip()}"
        while True:
            try:
                if httpx.get(f"{s['url']}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"a server did not answer /healthz; see {s['log'].name}")
            time.sleep(0.2)
    return servers


def _cpu_probe(servers: list[dict[str, Any]], url: str) -> Any:
    """The CPU meter's probe: each server process, its PostgreSQL backends (by application
    name), PostgreSQL's background processes, this process (the API clients and the
    submitter), the whole machine's busy seconds."""
    admin = sa.create_engine(sa.make_url(url), isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    me = os.getpid()

    def probe() -> dict[str, dict[Any, float]]:
        out: dict[str, dict[Any, float]] = defaultdict(dict)
        for i, s in enumerate(servers):
            cpu = stat_cpu_s(f"/proc/{s['proc'].pid}/stat")
            if cpu is not None:
                out[f"server{i}"][s["proc"].pid] = cpu
        try:
            with admin.connect() as conn:
                backends = conn.execute(
                    sa.text("SELECT pid, application_name, backend_type FROM pg_stat_activity")
                ).all()
        except sa.exc.SQLAlchemyError:
            backends = []
        for pid, app, kind in backends:
            if app and app.startswith("fleet-server"):
                component = f"postgres for {app.removeprefix('fleet-')}"
            elif kind != "client backend":
                component = "postgres background"
            else:
                continue
            cpu = stat_cpu_s(f"/proc/{pid}/stat")
            if cpu is not None:
                out[component][pid] = cpu
        cpu = stat_cpu_s(f"/proc/{me}/stat")
        if cpu is not None:
            out["fleet_sim clients"][me] = cpu
        busy, steal = machine_cpu_s()
        out["machine busy"][0] = busy
        out["machine steal"][0] = steal  # part of busy: other guests' turn
        return out

    return probe


def _collect(servers: list[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    """Each server's stats (SIGUSR1 makes it write them), then SIGTERM; how long each stop took."""
    for s in servers:
        s["proc"].send_signal(signal.SIGUSR1)
    stats = []
    for i in range(len(servers)):
        path = out / f"server{i}.stats.json"
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)  # the handler writes in one call; let it finish
        stats.append(json.loads(path.read_text()))
    t0 = time.monotonic()
    for s in servers:
        s["proc"].send_signal(signal.SIGTERM)
    for i, s in enumerate(servers):
        try:
            s["proc"].wait(timeout=max(1.0, 180 - (time.monotonic() - t0)))
            stats[i]["stop_s"] = round(time.monotonic() - t0, 1)
        except subprocess.TimeoutExpired:
            s["proc"].kill()
            s["proc"].wait()
            stats[i]["stop_s"] = None  # did not stop within 180 s: killed
        s["log"].close()
    return stats


def _job_body(
    args: argparse.Namespace, team: str, n: int, problems: list[dict[str, Any]]
) -> dict[str, Any]:
    labels = CLASSES[: args.classes]
    picked = [problems[(n * args.problems + k) % len(problems)] for k in range(args.problems)]
    return {
        "kernel": "matmul",
        "problems": picked,
        # Every team's k-th job asks for the same classes (n // teams is the round): equal loads.
        "device_classes": [
            f"replay:sim-{labels[((n // args.teams) * args.classes_per_job + j) % len(labels)]}"
            for j in range(args.classes_per_job)
        ],
        "trials": args.trials,
        "sampler": args.sampler,
        "seed": n,
        "team": team,
    }


def _run(args: argparse.Namespace, url: str, out: Path) -> dict[str, Any]:
    database = Database(url)
    database.upgrade()
    teams = [f"team{i}" for i in range(args.teams)]
    with database.session() as s:
        tokens = {t: repository.create_token(s, t, "submit")[1] for t in teams}
        _, admin = repository.create_token(s, "ops", "admin")
    problems = landscape_problems(LANDSCAPES)
    speed_idle = idle_us()  # before anything of the run starts
    servers = _start_servers(args, url, out)
    meter = CpuMeter(_cpu_probe(servers, url))
    meter.start()
    speed = SpeedProbe()
    speed.start()
    rec = Recorder()
    submitted: list[dict[str, Any]] = []
    stop = threading.Event()

    def client(i: int, token: str) -> httpx.Client:
        base = servers[i % len(servers)]["url"]
        return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60)

    def submit(team: str, n: int) -> None:
        body = _job_body(args, team, n, problems)
        with client(n, tokens[team]) as c:
            r = rec.call(c, "POST /v1/jobs", "POST", "/v1/jobs", json=body)
        if r is not None:
            submitted.append(
                {"team": team, "job": r.json()["id"], "at": time.time(),
                 "classes": body["device_classes"]}
            )  # fmt: skip

    def reader() -> None:
        with client(0, admin) as a, client(1, tokens[teams[0]]) as t:
            k = 0
            while not stop.is_set():
                k += 1
                rec.call(t, "GET /v1/jobs", "GET", "/v1/jobs", params={"limit": 20})
                rec.call(a, "GET /v1/jobs?status=running", "GET", "/v1/jobs",
                         params={"status": "running"})  # fmt: skip
                if submitted:
                    rec.call(a, "GET /v1/jobs/{id}", "GET", f"/v1/jobs/{submitted[-1]['job']}")
                rec.call(t, "GET /v1/best", "GET", "/v1/best", params={"kernel": "matmul"})
                if k % 5 == 0:
                    rec.call(a, "GET /v1/device-classes", "GET", "/v1/device-classes")
                stop.wait(args.read_every_s)

    t0_wall, t0 = time.time(), time.monotonic()
    readers = [threading.Thread(target=reader, daemon=True) for _ in range(args.readers)]
    for r in readers:
        r.start()
    n = 0
    for _ in range(args.burst):
        for team in teams:
            submit(team, n)
            n += 1
    t_burst = time.monotonic() - t0
    next_at = t0 + args.every_s
    while time.monotonic() - t0 < args.duration_s:
        time.sleep(max(0.0, min(next_at, t0 + args.duration_s) - time.monotonic()))
        if time.monotonic() - t0 >= args.duration_s:
            break
        for team in teams:
            submit(team, n)
            n += 1
        next_at += args.every_s
    t_end, t_end_wall = time.monotonic(), time.time()
    stop.set()
    for r in readers:
        r.join(30)
    meter.stop()
    speed.stop()
    stats = _collect(servers, out)
    report = _report(args, database, stats, rec, submitted, t0, t_end, t0_wall, t_end_wall, t_burst)
    report["cpu"] = _cpu(meter.series(), stats, t0 + args.warmup_s, t_end, report)
    report["phase_s"] = args.phase_s
    report["phases"] = phases(
        report["trials_per_s_series"],
        report["jobs_running_series"],
        meter.series(),
        t0 + report["series_first_epoch_s"] - t0_wall,
        args.phase_s,
    )
    during = speed.median_us()
    report["speed_probe_us"] = {
        "idle": round(speed_idle, 1),
        "run_median": None if during is None else round(during, 1),
    }
    return report


def _cpu(
    series: list[Any], stats: list[dict[str, Any]], start: float, end: float, r: dict[str, Any]
) -> dict[str, Any]:
    """CPU seconds in the steady window by component (processes, and each server's threads by
    role), as cores busy and as ms per trial at the window's trial rate."""
    elapsed, by_process = window(series, start, end)
    components = dict(by_process)
    for i, st in enumerate(stats):
        _, roles = window([(t, c) for t, c in st.get("cpu", [])], start, end)
        components.update({f"server{i} {role}": s for role, s in roles.items()})
    known = sum(v for k, v in by_process.items() if k not in ("machine busy", "machine steal"))
    busy, steal = by_process.get("machine busy", 0.0), by_process.get("machine steal", 0.0)
    components["rest of the machine"] = round(busy - steal - known, 3)
    rate = r["trials_per_s_steady"]
    return {
        "window_s": elapsed,
        "cpu_s": components,
        "cores": {k: round(v / max(elapsed, 1e-9), 3) for k, v in components.items()},
        "ms_per_trial": {
            k: round(1e3 * v / max(elapsed * rate, 1e-9), 3) for k, v in components.items()
        },
    }


def _report(
    args: argparse.Namespace,
    database: Database,
    stats: list[dict[str, Any]],
    rec: Recorder,
    submitted: list[dict[str, Any]],
    t0: float,
    t_end: float,
    t0_wall: float,
    t_end_wall: float,
    t_burst: float,
) -> dict[str, Any]:
    warm = args.warmup_s
    with database.engine.connect() as conn:
        per_second = conn.execute(
            sa.text(
                "SELECT extract(epoch FROM date_trunc('second', created_at)) AS s, count(*), "
                "count(*) FILTER (WHERE reused) FROM tf_trials GROUP BY 1 ORDER BY 1"
            )
        ).all()
        jobs = conn.execute(
            sa.text(
                "SELECT id, team, status, extract(epoch FROM created_at), "
                "extract(epoch FROM started_at), extract(epoch FROM finished_at) FROM tf_jobs"
            )
        ).all()
        by_team = conn.execute(
            sa.text(
                "SELECT j.team, count(*) FROM tf_trials t JOIN tf_jobs j ON j.id = t.job_id "
                "WHERE extract(epoch FROM t.created_at) BETWEEN :a AND :b "
                "GROUP BY 1 ORDER BY 1"
            ),
            {"a": t0_wall + warm, "b": t_end_wall},
        ).all()
        rows = {
            t: conn.scalar(sa.text(f"SELECT count(*) FROM {t}"))
            for t in ("tf_jobs", "tf_studies", "tf_trials", "tf_best_configs", "tf_audit")
        }
        size = {
            t: conn.scalar(sa.text(f"SELECT pg_total_relation_size('{t}')"))
            for t in ("tf_jobs", "tf_studies", "tf_trials", "tf_best_configs", "tf_audit")
        }
    window = steady_series([(s, n) for s, n, _ in per_second], t0_wall + warm, t_end_wall - 1)
    first = math.ceil(t0_wall + warm)  # the epoch second of window[0]
    spans = [(float(a), math.inf if b is None else float(b)) for *_, a, b in jobs if a is not None]
    running_series = [sum(a <= first + k < b for a, b in spans) for k in range(len(window))]
    steady = sum(window) / max(1, len(window))
    reused = steady_series([(s, n) for s, _, n in per_second], t0_wall + warm, t_end_wall - 1)
    # Each job's running interval (to its end, or the run's), on the pools' monotonic clock.
    running: dict[str, list[tuple[float, float]]] = defaultdict(list)
    classes_of = {j["job"]: j["classes"] for j in submitted}
    for job_id, _team, _status, _created, started, finished in jobs:
        if started is not None:
            a = t0 + float(started) - t0_wall
            b = t0 + float(finished) - t0_wall if finished is not None else t_end
            for c in classes_of.get(job_id, []):
                running[c].append((a, b))
    waits: dict[str, list[float]] = defaultdict(list)
    never: dict[str, int] = defaultdict(int)
    for _id, team, _status, created, started, _finished in jobs:
        if started is None:
            # Waited at least until the end of the run (a lower bound, counted apart).
            never[team] += 1
            waits[team].append(float(t_end_wall) - float(created))
        else:
            waits[team].append(float(started) - float(created))
    mean_wait = {t: round(statistics.mean(w), 2) for t, w in sorted(waits.items())}
    fair = max(mean_wait.values()) / max(1e-9, min(mean_wait.values())) if mean_wait else None
    classes = [c for st in stats for pool in st["pools"].values() for c in pool]
    util = busy_share(classes, t0 + warm, t_end)
    util_wanted = wanted_busy_share(classes, running, t0 + warm, t_end)
    claims = [ms for st in stats for ms in st["claims_ms"]]
    stops = [st["stop_s"] for st in stats]
    api = {
        route: {"calls": len(v), "p50_ms": _pct(v, 0.5), "p99_ms": _pct(v, 0.99),
                "errors": rec.errors.get(route, 0)}
        for route, v in sorted(rec.calls.items())
    }  # fmt: skip
    status_counts: dict[str, int] = defaultdict(int)
    for j in jobs:
        status_counts[j[2]] += 1
    return {
        "argv": sys.argv,
        "python": platform.python_version(),
        "load_at_end": os.getloadavg(),
        "duration_s": round(t_end - t0, 1),
        "burst_submit_s": round(t_burst, 1),
        "jobs_submitted": len(submitted),
        "jobs_by_status": dict(status_counts),
        "trials_per_s_steady": round(steady, 1),
        "trials_per_s_peak": max(window, default=0),
        "reused_per_s_steady": round(sum(reused) / max(1, len(reused)), 1),
        "trials_per_s_series": window,
        "jobs_running_series": running_series,
        "series_first_epoch_s": first,
        "slot_busy_share": round(util, 3),
        "slot_busy_share_with_jobs": None if util_wanted is None else round(util_wanted, 3),
        "claim_ms": {"calls": len(claims), "p50": _pct(claims, 0.5), "p99": _pct(claims, 0.99)},
        "server_stop_s": stops,
        "queue_wait_mean_s_by_team": mean_wait,
        "jobs_never_started_by_team": dict(never),
        "fairness_max_over_min_wait": round(fair, 2) if fair else None,
        "trials_in_window_by_team": {t: n for t, n in by_team},
        "trials_by_team_max_over_min": (
            round(max(n for _, n in by_team) / max(1, min(n for _, n in by_team)), 2)
            if by_team
            else None
        ),
        "api": api,
        "db_rows": rows,
        "db_bytes": size,
        "trial_bytes_per_row": round(size["tf_trials"] / max(1, rows["tf_trials"]), 1),
    }


def _share(x: float | None) -> str:
    return "no class had a job" if x is None else f"{x * 100:.1f}%"


def _markdown(r: dict[str, Any]) -> str:
    lines = [
        f"# fleet_sim: {r['argv'][1:]}",
        "",
        f"- duration {r['duration_s']} s; jobs submitted {r['jobs_submitted']} "
        f"(burst in {r['burst_submit_s']} s); by status {r['jobs_by_status']}",
        f"- trials/s sustained (mean over the steady window): **{r['trials_per_s_steady']}**, "
        f"peak second {r['trials_per_s_peak']}; of them reused (recorded from another job's "
        f"measurement, no GPU): {r['reused_per_s_steady']}/s",
        f"- simulated slots busy: **{r['slot_busy_share'] * 100:.1f}%**; while their class "
        f"had a job running: **{_share(r['slot_busy_share_with_jobs'])}**",
        f"- claim_next_job: {r['claim_ms']}; graceful stop of each server (s, None: killed at "
        f"180 s): {r['server_stop_s']}",
        f"- queue wait by team (mean s): {r['queue_wait_mean_s_by_team']}; max/min "
        f"**{r['fairness_max_over_min_wait']}**; never started: {r['jobs_never_started_by_team']}",
        f"- trials in the steady window by team: {r['trials_in_window_by_team']}; max/min "
        f"**{r['trials_by_team_max_over_min']}**",
        f"- DB rows {r['db_rows']}; bytes {r['db_bytes']}; "
        f"{r['trial_bytes_per_row']} bytes per trial row (table + indexes)",
        f"- load average at the end: {r['load_at_end']}",
        f"- speed probe (CPU us for a fixed piece of Python: the same work costs more on a slower "
        f"machine): {r['speed_probe_us']['idle']} before the run, median "
        f"{r['speed_probe_us']['run_median']} during it",
        "",
        f"CPU in the steady window ({r['cpu']['window_s']} s; ms per trial at "
        f"{r['trials_per_s_steady']} trials/s):",
        "",
        "| component | CPU s | cores | ms per trial |",
        "|---|---:|---:|---:|",
        *(
            f"| {k} | {v} | {r['cpu']['cores'][k]} | {r['cpu']['ms_per_trial'][k]} |"
            for k, v in r["cpu"]["cpu_s"].items()
        ),
        "",
        f"By phase ({r['phase_s']} s each, from the end of the warm-up):",
        "",
        "| from s | trials/s | jobs running | machine cores | machine ms/trial | servers ms/trial |",
        "|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {p['from_s']} | {p['trials_per_s']} | {p['jobs_running']} | "
            f"{p['machine_cores']} | {p['machine_ms_per_trial']} | {p['servers_ms_per_trial']} |"
            for p in r["phases"]
        ),
        "",
        "| API route | calls | p50 ms | p99 ms | errors |",
        "|---|---:|---:|---:|---:|",
    ]
    for route, a in r["api"].items():
        lines.append(f"| {route} | {a['calls']} | {a['p50_ms']} | {a['p99_ms']} | {a['errors']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument(
        "--classes", type=int, default=6, choices=range(1, len(CLASSES) + 1), metavar="1-48"
    )
    parser.add_argument("--servers", type=int, default=2, choices=range(1, 9), metavar="1-8")
    parser.add_argument("--slots", type=int, default=2, help="trials queued per simulated worker")
    parser.add_argument("--overhead-s", type=float, default=0.5, help="per-trial compile + setup")
    parser.add_argument("--scale", type=float, default=1.0, help="wall seconds per recorded second")
    parser.add_argument("--jobs-per-class", type=int, default=8, help="jobs sharing a class")
    parser.add_argument("--max-jobs", type=int, default=None, help="jobs a server runs at once")
    parser.add_argument("--teams", type=int, default=4)
    parser.add_argument("--burst", type=int, default=3, help="jobs per team at the start")
    parser.add_argument("--every-s", type=float, default=20.0, help="then one job per team every")
    parser.add_argument("--duration-s", type=float, default=180.0)
    parser.add_argument("--warmup-s", type=float, default=20.0, help="left out of the rates")
    parser.add_argument("--phase-s", type=int, default=60, help="seconds per row of the phases")
    parser.add_argument("--classes-per-job", type=int, default=1, help="device classes per job")
    parser.add_argument("--problems", type=int, default=4, help="problems per job")
    parser.add_argument("--trials", type=int, default=300, help="trials per study")
    parser.add_argument("--sampler", default="local", help="the jobs' sampler (default: local)")
    parser.add_argument("--readers", type=int, default=1, help="API polling threads")
    parser.add_argument("--read-every-s", type=float, default=0.5)
    parser.add_argument(
        "--landscape-space",
        action="store_true",
        help="studies search only the configs the landscapes answer (else the spec's whole space, "
        "whose other configs replay answers invalid)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the schema")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if not 1 <= args.classes_per_job <= args.classes:
        parser.error("--classes-per-job must be between 1 and --classes")
    if args.workers < args.classes * args.servers:
        parser.error("--workers must give every class at least one worker on every server")
    args.out.mkdir(parents=True, exist_ok=True)
    with fresh_schema("fleet", keep=args.keep) as (schema, url):
        report = _run(args, url, args.out)
        report["schema"] = schema
        (args.out / "fleet_sim.json").write_text(json.dumps(report, indent=1) + "\n")
        (args.out / "TABLE.md").write_text(_markdown(report))
        print(_markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
