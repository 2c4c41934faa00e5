"""The whole service in one run: ``tunefleet serve`` with its scheduler and a replay worker (a
local Ray), two teams submitting and watching jobs, reading each other's best configs and pulling a
bundle that ``load_bundle`` loads; SIGTERM ends it cleanly."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from db import Database
from db.models import TokenScope
from search_spaces.bundle import load_bundle
from tests.server.conftest import ROOT, make_token, sse_events, start_serve

LANDSCAPE = (
    ROOT / "benchmarks" / "landscapes" / "h200" / "matmul_M16_N4096_K4096_dtypebfloat16.json.gz"
)
PROBLEM = "M=16,N=4096,K=4096,dtype=bfloat16"
TRIALS = 8


@pytest.fixture
def backend() -> str:
    return "sqlite"


def test_two_teams_run_watch_share_and_pull(db: Database, tmp_path: Path) -> None:
    url = db.engine.url.render_as_string(hide_password=False)
    tokens = {team: make_token(db, team, TokenScope.SUBMIT)[1] for team in ("alpha", "beta")}
    device = f"replay:{LANDSCAPE}"
    proc, base = start_serve("--device", device, "--db", url)
    try:

        def client(team: str) -> httpx.Client:
            headers = {"Authorization": f"Bearer {tokens[team]}"}
            return httpx.Client(base_url=base, headers=headers, timeout=60)

        body = {"kernel": "matmul", "problems": [PROBLEM], "trials": TRIALS, "devices": device}
        with client("alpha") as alpha, client("beta") as beta:
            mine = alpha.post("/v1/jobs", json=body)
            assert mine.status_code == 201, mine.text
            theirs = beta.post("/v1/jobs", json={**body, "seed": 1}).json()["id"]
            job_id = mine.json()["id"]

            seen: list[dict[str, object]] = []
            with alpha.stream("GET", f"/v1/jobs/{job_id}/events", params={"interval_s": 0.5}) as s:
                for kind, data in sse_events(s.iter_lines()):
                    if kind == "end":
                        assert data == {"status": "done"}, seen[-1]["error"]
                        break
                    seen.append(data)
            assert seen[-1]["trials_done"] == TRIALS
            done = [e["trials_done"] for e in seen]
            assert done == sorted(done)

            assert [j["id"] for j in alpha.get("/v1/jobs").json()["items"]] == [job_id]
            assert alpha.get(f"/v1/jobs/{theirs}").status_code == 404
            study = alpha.get(f"/v1/jobs/{job_id}").json()["studies"][0]
            assert study["device_class"] == "replay:NVIDIA H200" and study["best_ms"] > 0

            for _ in range(120):  # beta's job runs after alpha's on the one replay worker
                if beta.get(f"/v1/jobs/{theirs}").json()["status"] == "done":
                    break
                time.sleep(0.5)
            best = beta.get("/v1/best", params={"kernel": "matmul", "problem": PROBLEM}).json()
            (entry,) = best["best"]
            assert entry["team"] in ("alpha", "beta") and entry["job_id"] in (job_id, theirs)

            r = beta.get("/v1/bundles/matmul", params={"device_class": "replay:NVIDIA H200"})
            assert r.status_code == 200, r.text
            (tmp_path / "bundle.json").write_bytes(r.content)
            bundle = load_bundle(tmp_path / "bundle.json")
            assert [e.config for e in bundle.entries] == [entry["config"]]
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
