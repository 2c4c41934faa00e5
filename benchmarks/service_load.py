"""Load on the team service's HTTP API while a job runs: do progress polls, best-config queries and
bundle downloads stay fast with many clients?

Usage (repo root): python benchmarks/service_load.py [--clients 50] [--seconds 30] [--interval 1.0]
    [--bundle-every 5] [--entries 1000] [--db URL] [--driver server|process [--job-nice N]]
    [--out DIR]

Loopback only and bounded: a fresh database (a temporary SQLite file, or the PostgreSQL --db URL
names, which must be empty) gets ``--entries`` stored best configs of matmul on one device class
(the bundle's size) and tokens; ``tunefleet serve`` serves it on a free 127.0.0.1 port and its
scheduler runs a replay job submitted through the API (the recorded H200 matmul landscapes: no
GPU; ``--driver process``: ``tunefleet tune`` runs it in a process of its own, as another server
would, with ``serve --no-scheduler``). Then ``--clients`` clients, each with its own keep-alive
connection and its own token of the job's team, every ``--interval`` seconds poll the job
(``GET /v1/jobs/{id}``) and query the best config of a random stored problem (``GET /v1/best``),
and every ``--bundle-every`` rounds download the native bundle (``GET /v1/bundles/matmul``), for
``--seconds`` seconds after a 3 s warm-up. Latencies are client-side (request sent to body read). Prints one line per request kind (count,
errors, p50/p90/p99/max ms) and the trials the job recorded meanwhile; ``--out`` also writes the
samples as JSON. Exits 1 if any request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from db import Database, JobStatus, repository  # noqa: E402
from db.models import TokenScope  # noqa: E402
from search_spaces.problem import problem_key  # noqa: E402
from search_spaces.registry import get_spec  # noqa: E402
from search_spaces.space import Vendor  # noqa: E402

CLASS_KEY = "NVIDIA H200"
LANDSCAPES = ROOT / "benchmarks" / "landscapes" / "h200"
JOB_SHAPES = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
WARMUP_S = 3.0


def seed(database: Database, entries: int) -> list[str]:
    """``entries`` best configs of matmul on CLASS_KEY from a finished job of team alpha; returns
    the problems as ``M=..,N=..,K=..,dtype=..`` strings."""
    spec = get_spec("matmul")
    config = spec.default_config(Vendor.NVIDIA)
    version = spec.version_hash()
    side = 1
    while side**3 < entries:
        side += 1
    dims = [64 * (i + 1) for i in range(side)]
    problems = [
        {"M": m, "N": n, "K": k, "dtype": "float16"} for m in dims for n in dims for k in dims
    ][:entries]
    with database.session() as s:
        kernel_id = repository.ensure_kernel(s, spec.name, version, spec.space.hash())
        job_id = repository.create_job(s, kernel_id, {"kernel": "matmul", "problems": []}, "alpha")
        repository.set_job_status(s, job_id, JobStatus.RUNNING)
        repository.set_job_status(s, job_id, JobStatus.DONE)
        class_id = repository.ensure_device_class(s, CLASS_KEY, "nvidia", CLASS_KEY, "sm_90")
        for i, problem in enumerate(problems):
            key = problem_key(spec.validate_problem(problem))
            repository.upsert_best(
                s, spec.name, version, key, class_id, "3.6", config, 0.01 + i * 1e-5, None,
                job_id, None,
            )  # fmt: skip
    return [",".join(f"{k}={v}" for k, v in p.items()) for p in problems]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *args]


def wait_healthy(base: str, proc: subprocess.Popen[bytes], deadline_s: float = 60) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit("the server did not answer /healthz within 60 s")


@dataclass
class Samples:
    """Latencies (ms) and failures of one request kind."""

    ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def line(self, kind: str) -> str:
        if not self.ms:
            return f"{kind:9s} no requests; errors {len(self.errors)}"
        q = statistics.quantiles(self.ms, n=100, method="inclusive")
        return (
            f"{kind:9s} n={len(self.ms):6d} errors={len(self.errors):3d}  p50 {q[49]:7.2f} ms  "
            f"p90 {q[89]:7.2f} ms  p99 {q[98]:7.2f} ms  max {max(self.ms):7.2f} ms"
        )


class Connection:
    """One keep-alive HTTP/1.1 connection with as little client work as possible (so the figures
    are the server's): GET only, responses with a Content-Length."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.head = f"Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\r\n"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, target: str) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        self.writer.write(f"GET {target} HTTP/1.1\r\n{self.head}".encode())
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def client(
    port: int,
    token: str,
    job_id: int,
    problems: list[str],
    args: argparse.Namespace,
    start_at: float,
    stop_at: float,
    results: dict[str, Samples],
    rng: random.Random,
) -> None:
    loop = asyncio.get_running_loop()
    conn = Connection(port, token)
    bundle_checked = False
    await asyncio.sleep(rng.uniform(0, args.interval))  # spread the clients over a round
    round_no = rng.randrange(args.bundle_every)
    klass = quote(CLASS_KEY)
    try:
        while loop.time() < stop_at:
            problem = quote(rng.choice(problems))
            requests = [
                ("progress", f"/v1/jobs/{job_id}"),
                ("best", f"/v1/best?kernel=matmul&device_class={klass}&problem={problem}"),
            ]
            if round_no % args.bundle_every == 0:
                requests.append(("bundle", f"/v1/bundles/matmul?device_class={klass}"))
            round_no += 1
            tick = loop.time()
            for kind, target in requests:
                sent = time.perf_counter()
                try:
                    status, body = await conn.get(target)
                    ms = (time.perf_counter() - sent) * 1e3
                    error = None
                    if status != 200:
                        error = f"{status} {body[:200]!r}"
                    elif kind == "best" and len(json.loads(body)["best"]) != 1:
                        error = "best query without exactly one answer"
                    elif kind == "bundle" and not bundle_checked:
                        bundle_checked = True
                        if len(json.loads(body)["entries"]) != args.entries:
                            error = "bundle with a wrong number of entries"
                except (OSError, ValueError, asyncio.IncompleteReadError) as exc:
                    ms, error = (time.perf_counter() - sent) * 1e3, f"{type(exc).__name__}: {exc}"
                    conn.close()
                    conn = Connection(port, token)
                if tick >= start_at:
                    results[kind].ms.append(ms)
                    if error is not None:
                        results[kind].errors.append(error)
            await asyncio.sleep(max(0.0, tick + args.interval - loop.time()))
    finally:
        conn.close()


async def load(
    port: int, tokens: list[str], job_id: int, problems: list[str], args: argparse.Namespace
) -> dict[str, Samples]:
    results = {kind: Samples() for kind in ("progress", "best", "bundle")}
    loop = asyncio.get_running_loop()
    start_at = loop.time() + WARMUP_S
    stop_at = start_at + args.seconds
    rng = random.Random(0)
    await asyncio.gather(
        *(
            client(
                port,
                tokens[i],
                job_id,
                problems,
                args,
                start_at,
                stop_at,
                results,
                random.Random(rng.random()),
            )
            for i in range(args.clients)
        )
    )
    return results


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` and its waited-for children (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def busy_processes() -> str:
    """The processes using the most CPU now (what else ran during the measurement)."""
    out = subprocess.run(
        ["ps", "-eo", "pcpu,etimes,args", "--sort=-pcpu"], capture_output=True, text=True
    ).stdout.splitlines()
    return "\n".join(line[:160] for line in out[:8])


def job_problems() -> tuple[list[str], str]:
    """The replay job's problems and its ``--device`` value (eight recorded H200 landscapes)."""
    shapes = [(m, n, k) for m in (16, 128) for n, k in JOB_SHAPES]
    files = [LANDSCAPES / f"matmul_M{m}_N{n}_K{k}_dtypebfloat16.json.gz" for m, n, k in shapes]
    problems = [f"M={m},N={n},K={k},dtype=bfloat16" for m, n, k in shapes]
    return problems, "replay:" + ",".join(map(str, files))


def start_job(
    args: argparse.Namespace, base: str, url: str, env: dict[str, str], submit_token: str
) -> subprocess.Popen[bytes] | None:
    """Start the replay job: submitted to the server (whose scheduler runs it), or run by
    ``tunefleet tune`` in a process of its own (``--driver process``, as another server would)."""
    problems, device = job_problems()
    budget = {"trials": 100000, "minutes": 10}
    if args.driver == "server":
        body = {"kernel": "matmul", "problems": problems, "devices": device, **budget}
        headers = {"Authorization": f"Bearer {submit_token}"}
        r = httpx.post(f"{base}/v1/jobs", json=body, headers=headers, timeout=60)
        if r.status_code != 201:
            raise SystemExit(f"submitting the replay job failed: {r.status_code} {r.text}")
        return None
    cmd = cli("tune", "matmul", "--trials", "100000", "--minutes", "10", "--team", "alpha")
    for problem in problems:
        cmd += ["-p", problem]
    cmd += ["--device", device, "--db", url, "--json"]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=(lambda: os.nice(args.job_nice)) if args.job_nice else None,
    )


def running_job(base: str, auth: dict[str, str], job: subprocess.Popen[bytes] | None) -> int:
    """The job's id once it runs and has recorded trials."""
    deadline = time.monotonic() + 180
    while True:
        if (job is not None and job.poll() is not None) or time.monotonic() > deadline:
            raise SystemExit("the replay job did not start within 180 s")
        page = httpx.get(f"{base}/v1/jobs", params={"status": "running"}, headers=auth).json()
        if page["items"] and page["items"][0]["trials_done"] > 0:
            return int(page["items"][0]["id"])
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument(
        "--interval", type=float, default=1.0, help="Seconds between a client's rounds."
    )
    parser.add_argument(
        "--bundle-every", type=int, default=5, help="A bundle download every N rounds."
    )
    parser.add_argument("--entries", type=int, default=1000, help="Best configs in the bundle.")
    parser.add_argument(
        "--db", help="An empty PostgreSQL database (default: a temporary SQLite file)."
    )
    parser.add_argument(
        "--driver",
        choices=("server", "process"),
        default="server",
        help="Who runs the job: the server's scheduler, or `tunefleet tune` in its own process.",
    )
    parser.add_argument(
        "--job-nice",
        type=int,
        default=0,
        help="With --driver process: the job's niceness (its Ray workers inherit it).",
    )
    parser.add_argument("--out", type=Path, help="Folder for samples.json.")
    args = parser.parse_args()
    if not (1 <= args.clients <= 200 and 0 < args.seconds <= 120 and args.entries <= 20000):
        raise SystemExit("bounded benchmark: 1-200 clients, at most 120 s, at most 20000 entries")

    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{Path(tmp) / 'load.db'}"
        database = Database(url)
        database.upgrade()
        problems = seed(database, args.entries)
        with database.session() as s:
            tokens = [
                repository.create_token(s, "alpha", TokenScope.READ)[1] for _ in range(args.clients)
            ]
            submit = repository.create_token(s, "alpha", TokenScope.SUBMIT)[1]
            admin = repository.create_token(s, "ops", TokenScope.ADMIN)[1]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        serve = ["serve", "--port", str(port), "--db", url]
        serve += ["--device", job_problems()[1]] if args.driver == "server" else ["--no-scheduler"]
        server = subprocess.Popen(
            cli(*serve), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        job = None
        auth = {"Authorization": f"Bearer {admin}"}
        try:
            wait_healthy(base, server)
            job = start_job(args, base, url, env, submit)
            job_id = running_job(base, auth, job)
            first = httpx.get(f"{base}/v1/jobs/{job_id}", headers=auth).json()["trials_done"]
            before = busy_processes()
            load_start = os.getloadavg()
            pids = [server.pid] + ([job.pid] if job is not None else [])
            cpu0 = [cpu_seconds(pid) for pid in pids] + [time.process_time()]
            t0 = time.monotonic()
            results = asyncio.run(load(port, tokens, job_id, problems, args))
            wall = time.monotonic() - t0
            cpu1 = [cpu_seconds(pid) for pid in pids] + [time.process_time()]
            load_end = os.getloadavg()
            detail = httpx.get(f"{base}/v1/jobs/{job_id}", headers=auth).json()
            httpx.post(f"{base}/v1/jobs/{job_id}/cancel", headers=auth)
            if job is not None:
                job.wait(120)
        finally:
            for proc in (job, server):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(120)
                    except subprocess.TimeoutExpired:
                        proc.kill()
        database.close()

    driver = (
        "the server's scheduler"
        if args.driver == "server"
        else f"`tunefleet tune` in its own process (niceness {args.job_nice})"
    )
    print(
        f"# {args.clients} clients, {args.seconds:.0f} s (+{WARMUP_S:.0f} s warm-up), a round every "
        f"{args.interval} s per client (progress + best; bundle every {args.bundle_every} rounds), "
        f"bundle of {args.entries} entries, {'PostgreSQL' if args.db else 'SQLite'}; the replay "
        f"job run by {driver}"
    )
    for kind, samples in results.items():
        print(samples.line(kind))
    print(
        f"job {job_id} during the load: status {detail['status']}, trials done "
        f"{first} -> {detail['trials_done']}; load wall {wall:.1f} s"
    )
    spent = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
    names = ["server" + (" (API + scheduler)" if job is None else ""), "job driver", "clients"]
    shown = names if job is not None else [names[0], names[2]]
    print(
        "CPU seconds over the load: "
        + ", ".join(f"{n} {v:.1f}" for n, v in zip(shown, spent, strict=True))
        + f" (of {wall * (os.cpu_count() or 1):.0f} on {os.cpu_count()} cores; Ray workers not counted)"
    )
    print(f"load average (1/5/15 min) at start {load_start}, at end {load_end}")
    print("# busiest processes when the load started:\n" + before)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "samples.json").write_text(
            json.dumps({k: {"ms": v.ms, "errors": v.errors} for k, v in results.items()})
        )
    failed = sum(len(s.errors) for s in results.values())
    for kind, samples in results.items():
        for error in samples.errors[:3]:
            print(f"{kind} error: {error}", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
