import os
import subprocess
import sys
import time

sys.path.insert(0, "/work/wt/suite")
from tests.conftest import ray_head

ROOT = "/work/wt/suite"
env = {**os.environ, "PYTHONPATH": ROOT, "TRITON_INTERPRET": "1"}
env.pop("RAY_ADDRESS", None)


def tune(extra, i):
    db = f"sqlite:////tmp/suite/ab_{time.time_ns()}.db"
    t = time.monotonic()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "tune",
            "matmul",
            "-p",
            "M=16,N=16,K=16,dtype=float16",
            "--trials",
            "4",
            "--device",
            "interpreter",
            "--db",
            db,
            "--json",
        ],
        cwd=ROOT,
        env={**env, **extra},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-1000:]
    return time.monotonic() - t


with ray_head(env, __import__("pathlib").Path("/tmp/suite/abhead")) as addr:
    for i in range(3):
        a = tune({}, i)
        b = tune({"RAY_ADDRESS": addr}, i)
        print(
            f"round {i}: local Ray {a:.1f} s, shared head {b:.1f} s, load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
