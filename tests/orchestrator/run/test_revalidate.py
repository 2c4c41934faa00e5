"""`tunefleet revalidate` re-times stored bests on the interpreter and flags the regressed one,
naming the environment that changed, and marks the rows: `best --json` and the pulled bundle
show the mark; a class other than this machine's is refused."""

from __future__ import annotations

import json
from pathlib import Path

from db import Database, repository
from orchestrator.run.revalidate import Verdict
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec
from search_spaces.space import Vendor
from tests.orchestrator.commands.test_cli import cli

PROBLEMS = (
    {"M": 16, "N": 16, "K": 16, "dtype": "float16"},
    {"M": 32, "N": 16, "K": 16, "dtype": "float16"},
)


def _store(database: Database) -> None:
    spec = get_spec("matmul")
    config = spec.default_config(Vendor.CPU)
    with database.session() as s:
        class_id = repository.ensure_device_class(s, "cpu", "cpu", "cpu", "interpreter")
        env = repository.ensure_environment(s, class_id, "", "interpreter", "3.0.0", "2.0.0")
        for problem, stored_ms in zip(PROBLEMS, (1e-6, 1e6), strict=True):
            repository.upsert_best(
                s,
                spec.name,
                spec.version_hash(),
                problem_key(problem),
                class_id,
                "3.0",
                config,
                stored_ms,
                None,
                None,
                env,
            )


def test_revalidate_flags_the_regressed_best(
    database: Database, db_url: str, tmp_path: Path
) -> None:
    _store(database)
    done = cli(
        "revalidate",
        "matmul",
        "--device-class",
        "cpu",
        "--device",
        "interpreter",
        "--db",
        db_url,
        "--json",
    )
    assert done.returncode == 0, done.stderr
    results = {
        json.dumps(r["problem"], sort_keys=True): r for r in json.loads(done.stdout)["results"]
    }
    fast, slow = (results[json.dumps(p, sort_keys=True)] for p in PROBLEMS)
    assert fast["verdict"] == "regressed" and fast["now_ms"] > 0
    assert slow["verdict"] == "holds"
    assert any(c.startswith("triton 3.0.0 -> ") for c in fast["environment_changed"])

    with database.session(readonly=True) as s:
        rows = {r.problem_key: r for r in repository.get_best(s, "matmul")}
        marked, kept = (rows[problem_key(p)] for p in PROBLEMS)
        (history,) = repository.retimings(s, marked.id)  # the drift history has the re-timing
    assert (history.state, history.time_ms, history.job_id) == (
        Verdict.REGRESSED,
        fast["now_ms"],
        None,
    )
    assert history.changed is not None and "triton 3.0.0 -> " in history.changed
    assert (marked.revalidation, marked.revalidated_ms) == (Verdict.REGRESSED, fast["now_ms"])
    assert kept.revalidation is Verdict.HOLDS and not kept.stale
    assert marked.revalidated_environment_id not in (None, marked.environment_id)

    shown = cli("best", "matmul", "--db", db_url, "--json")
    assert shown.returncode == 0, shown.stderr
    states = {
        json.dumps(b["problem"], sort_keys=True): b["revalidation"]
        for b in json.loads(shown.stdout)["best"]
    }
    fast_mark, slow_mark = (states[json.dumps(p, sort_keys=True)] for p in PROBLEMS)
    assert fast_mark["state"] == "regressed" and fast_mark["ratio"] > 1.05
    assert slow_mark["state"] == "holds"
    table = cli("best", "matmul", "--db", db_url, "--wide")
    assert "REGRESSED" in table.stdout and "holds" in table.stdout

    pulled = cli("pull", "matmul", "--out", str(tmp_path / "b"), "--db", db_url)
    assert pulled.returncode == 0, pulled.stderr
    (bundle,) = (tmp_path / "b").glob("*.json")
    entries = {
        json.dumps(e["problem"], sort_keys=True): e
        for e in json.loads(bundle.read_text())["entries"]
    }
    flagged, plain = (entries[json.dumps(p, sort_keys=True)] for p in PROBLEMS)
    assert flagged["revalidation"]["state"] == "regressed" and "revalidation" not in plain

    refused = cli(
        "revalidate", "matmul", "--device-class", "h200", "--device", "interpreter", "--db", db_url
    )
    assert refused.returncode == 2 and "not NVIDIA H200" in refused.stderr
