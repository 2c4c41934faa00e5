"""`tunefleet revalidate` re-times stored bests on the interpreter and flags the regressed one,
naming the environment that changed; a class other than this machine's is refused."""

from __future__ import annotations

import json
from pathlib import Path

from db import Database, repository
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec
from search_spaces.space import Vendor
from tests.orchestrator.test_cli import cli

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
                "cpu",
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

    refused = cli(
        "revalidate", "matmul", "--device-class", "h200", "--device", "interpreter", "--db", db_url
    )
    assert refused.returncode == 2 and "not NVIDIA H200" in refused.stderr
