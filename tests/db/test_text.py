"""Stored text is always storable (issue 45): NUL, lone surrogates and over-long values from a
kernel, a device or a request are written and read back on SQLite and PostgreSQL."""

from __future__ import annotations

from db import Database, JobStatus
from db import repository as repo
from db.text import CUT_MARK, storable, storable_json

NUL_AND_SURROGATE = "bad \x00 byte and a lone \ud800 surrogate"
ESCAPED = "bad \\x00 byte and a lone \\ud800 surrogate"


def test_storable_escapes_and_cuts() -> None:
    assert storable(NUL_AND_SURROGATE) == ESCAPED
    assert storable("plain ünïcode 🙂") == "plain ünïcode 🙂"  # a surrogate pair is not lone
    cut = storable("x" * 300, 200)
    assert len(cut) == 200 and cut.endswith(CUT_MARK)
    assert storable_json({"k\x00": ["\udfff", 1, None, {"v": "\x00"}]}) == {
        "k\\x00": ["\\udfff", 1, None, {"v": "\\x00"}]
    }


def test_a_trial_with_unstorable_text_is_written_and_read_back(db: Database) -> None:
    long_name = "GPU " + "y" * 400
    with db.session() as s:
        dc = repo.ensure_device_class(s, long_name, "nvidia", long_name, "sm_90")
        kernel = repo.ensure_kernel(s, "matmul", "v1", "space1")
        job = repo.create_job(s, kernel, {"kernel": "matmul", "note": NUL_AND_SURROGATE}, "ml")
        study = repo.ensure_study(s, job, kernel, '{"M":64}', {"M": 64}, dc, "tpe", f"job{job}")
        ids = repo.record_trials(
            s,
            [
                {
                    "kernel_id": kernel,
                    "problem_key": '{"M":64}',
                    "device_class_id": dc,
                    "config": {"BLOCK": 64, "tag": NUL_AND_SURROGATE},
                    "config_key": '{"BLOCK":64}',
                    "outcome": "compile_error",
                    "job_id": job,
                    "study_id": study,
                    "error": NUL_AND_SURROGATE,
                    "worker": "w" * 500,
                    "host": "h\x00",
                },
                {
                    "kernel_id": kernel,
                    "problem_key": '{"M":64}',
                    "device_class_id": dc,
                    "config": {"BLOCK": 32},
                    "config_key": '{"BLOCK":32}',
                    "outcome": "ok",
                    "job_id": job,
                    "study_id": study,
                    "median_ms": 0.5,
                },
            ],
        )
        repo.set_job_status(s, job, JobStatus.RUNNING)
        repo.set_job_status(s, job, JobStatus.FAILED, NUL_AND_SURROGATE)
        repo.write_audit(s, action="job.submit", target=NUL_AND_SURROGATE, detail={"x": "\x00"})
    with db.session(readonly=True) as s:
        trials = repo.trials_for_study(s, study)
        record = repo.get_job(s, job)
        audit = repo.list_audit(s)
    bad, good = sorted(trials, key=lambda t: t.id)
    assert [t.id for t in (bad, good)] == ids
    assert bad.error == ESCAPED and bad.config["tag"] == ESCAPED
    assert len(bad.worker or "") == 200 and (bad.worker or "").endswith(CUT_MARK)
    assert bad.host == "h\\x00"
    assert good.median_ms == 0.5  # the batch's good result is kept
    assert record.error == ESCAPED and record.spec["note"] == ESCAPED
    assert audit[0].target == ESCAPED and audit[0].detail == {"x": "\\x00"}
