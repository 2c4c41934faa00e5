"""JsonLinesReporter on a real job (in-process replay pool, SQLite): every line is one JSON
object, a study line per study, a trial line per measured trial up to the budget, notes, and the
summary last."""

from __future__ import annotations

import io
import json

import pytest

from db import Database, JobStatus
from orchestrator.run.driver import Driver, submit_job
from orchestrator.run.jobs import JobSpec
from orchestrator.run.local_pool import LocalPool
from orchestrator.run.progress import JsonLinesReporter

PROBLEMS = [
    {"M": 256, "N": 256, "K": 256, "dtype": "float16"},
    {"M": 1024, "N": 1024, "K": 1024, "dtype": "float16"},
]


@pytest.fixture
def pool(h200_pool: LocalPool) -> LocalPool:
    return h200_pool


def test_json_lines_stream_one_event_per_line(pool: LocalPool, database: Database) -> None:
    stream = io.StringIO()
    reporter = JsonLinesReporter(stream)
    spec = JobSpec.from_mapping({"kernel": "matmul", "problems": PROBLEMS, "trials": 5})
    result = Driver(database, pool, reporter=reporter, retime_rounds=1, poll_s=0.0).run(
        submit_job(database, spec, pool)
    )
    assert result.status is JobStatus.DONE
    reporter.summary({"job_id": result.job_id, "status": result.status.value})
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[-1] == "summary" and events[-1]["job_id"] == result.job_id
    assert all(e["at"].endswith("+00:00") for e in events)
    studies = [e for e in events if e["event"] == "study"]
    assert len(studies) == 2 and {s["budget"] for s in studies} == {5}
    assert kinds.index("trial") > max(i for i, k in enumerate(kinds) if k == "study")
    for study in studies:
        done = [e["done"] for e in events if e["event"] == "trial" and e["study"] == study["study"]]
        assert done == sorted(done) and done[-1] == 5, done
        assert len(done) >= 5  # one line per trial at least
    last = [e for e in events if e["event"] == "trial"][-1]
    assert last["best_ms"] > 0 and last["budget"] == 5
    assert any(e["event"] == "note" for e in events)  # the re-timing is announced
