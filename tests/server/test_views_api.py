"""The JSON routes of the web page through a real server on SQLite and PostgreSQL: auth, teams,
a study's analysis, trial pages sorted by the database, the portability matrix."""

from __future__ import annotations

import itertools
from typing import Any

from db import Database, StudyStatus, repository
from search_spaces.problem import problem_key
from search_spaces.registry import get_spec
from search_spaces.space import Vendor, config_key
from tests.server.conftest import CLASS_KEY, MATMUL_PROBLEMS, Api, seed_best
from workers.device_table import lookup

OTHER = "NVIDIA A100-SXM4-80GB"


def _study(api: Api, job_id: int) -> dict[str, Any]:
    studies = api.call("alpha", "GET", f"/v1/jobs/{job_id}").json()["studies"]
    return dict(studies[0])


def _add_trials(
    database: Database,
    job_id: int,
    configs: list[dict[str, Any]],
    times: list[float | None],
    *,
    class_key: str = CLASS_KEY,
    study_id: int | None = None,
) -> None:
    """Trials of matmul on the first test problem, one per config (time None: a compile error)."""
    spec = get_spec("matmul")
    key = problem_key(spec.validate_problem(MATMUL_PROBLEMS[0]))
    with database.session() as s:
        kernel_id = repository.ensure_kernel(s, spec.name, spec.version_hash(), spec.space.hash())
        cls_id = repository.ensure_device_class(s, class_key, "nvidia", class_key, "sm_90")
        for config, ms in zip(configs, times, strict=True):
            repository.record_trial(
                s,
                kernel_id=kernel_id,
                problem_key=key,
                device_class_id=cls_id,
                config=config,
                config_key=config_key(config),
                outcome="ok" if ms is not None else "compile_error",
                job_id=job_id,
                study_id=study_id,
                median_ms=ms,
                error=None if ms is not None else "ptxas: too many registers",
            )


def _others() -> list[dict[str, Any]]:
    """Valid matmul configs on CLASS_KEY other than the spec default (which seed_best measured)."""
    spec = get_spec("matmul")
    default = config_key(spec.default_config(Vendor.NVIDIA))
    valid = spec.space.iter_valid(lookup(CLASS_KEY).limits)
    return list(itertools.islice((c for c in valid if config_key(c) != default), 10))


def test_every_page_route_needs_a_token(api: Api) -> None:
    job_id = seed_best(api.database, "alpha", MATMUL_PROBLEMS)
    study = _study(api, job_id)["id"]
    for path in (
        "/v1/whoami",
        f"/v1/jobs/{job_id}/studies/{study}",
        f"/v1/jobs/{job_id}/studies/{study}/trials",
        "/v1/portability?kernel=matmul",
    ):
        assert api.call(None, "GET", path).status_code == 401, path
    assert api.call("alpha_read", "GET", "/v1/whoami").json() == {
        "token_id": api.tokens["alpha_read"][0],
        "team": "alpha",
        "scope": "read",
        "can_cancel": False,
        "admin": False,
    }
    # The HTML shells load without a token (they hold no data) and forbid inline script.
    shell = api.call(None, "GET", f"/jobs/{job_id}")
    assert shell.status_code == 200 and "text/html" in shell.headers["content-type"]
    assert "script-src 'self'" in shell.headers["content-security-policy"]
    assert api.call(None, "GET", "/static/uPlot.iife.min.js").status_code == 200


def test_study_analysis_and_sorted_trial_pages(api: Api) -> None:
    job_id = seed_best(api.database, "alpha", MATMUL_PROBLEMS)
    study = _study(api, job_id)
    times = [0.05, 0.02, None, 0.008, 0.03]
    _add_trials(api.database, job_id, _others()[:5], times, study_id=study["id"])
    base = f"/v1/jobs/{job_id}/studies/{study['id']}"

    analysis = api.call("alpha_read", "GET", base).json()
    assert analysis["trials"] == 6
    # The seeded default (0.01 ms) first, then the improvement at trial 5, then the last trial.
    assert analysis["convergence"] == [[1, 0.01], [5, 0.008], [6, 0.008]]
    # The study still runs: its best is the fastest trial so far, with no speedup over the
    # default before the final re-timing (the default's own trial is shown).
    assert analysis["best_source"] == "so_far" and analysis["best_ms"] == 0.008
    assert analysis["default_config"] == get_spec("matmul").default_config(Vendor.NVIDIA)
    assert analysis["default_ms"] == 0.01 and analysis["default_outcome"] == "ok"
    assert analysis["speedup_vs_default"] is None
    assert analysis["median_ms"] == 0.02 and analysis["fastest_trial_ms"] == 0.008
    assert round(analysis["speedup_vs_median"], 6) == round(0.02 / 0.008, 6)
    assert abs(sum(analysis["importance"].values()) - 1) < 1e-9
    assert api.call("beta", "GET", base).status_code == 404

    # Once the study ends, its key's stored best row (0.01 ms) is its best, whatever the trials.
    with api.database.session() as s:
        repository.set_study_status(s, study["id"], StudyStatus.DONE)
    decided = api.call("alpha_read", "GET", base).json()
    assert decided["best_source"] == "decided" and decided["best_ms"] == 0.01
    assert decided["study"]["best_ms"] == 0.01 and decided["fastest_trial_ms"] == 0.008

    page = api.call("alpha", "GET", f"{base}/trials?sort=time&order=desc&limit=2").json()
    assert page["total"] == 6 and page["sort"] == "time desc"
    assert [t["median_ms"] for t in page["items"]] == [0.05, 0.03]
    last = api.call("alpha", "GET", f"{base}/trials?sort=time&order=desc&offset=5").json()
    assert last["items"][0]["outcome"] == "compile_error"  # no time: last either way
    assert last["items"][0]["error"] == "ptxas: too many registers"
    failed = api.call("alpha", "GET", f"{base}/trials?outcome=compile_error").json()
    assert failed["total"] == 1
    for bad in ("sort=name", "order=up", "limit=0", "limit=501", "outcome=great"):
        r = api.call("alpha", "GET", f"{base}/trials?{bad}")
        assert r.status_code == 422, (bad, r.text)
        assert r.json()["error"].startswith("invalid request")
    assert api.call("alpha", "GET", f"/v1/jobs/{job_id}/studies/999999").status_code == 404
    assert api.call("beta", "GET", f"{base}/trials").status_code == 404


def test_the_portability_matrix(api: Api) -> None:
    job_id = seed_best(api.database, "alpha", MATMUL_PROBLEMS[:1])
    one = api.call("beta", "GET", "/v1/portability?kernel=matmul").json()
    assert one["classes"] == [CLASS_KEY] and len(one["cells"]) == 1
    assert one["cells"][0]["loss_pct"] == 0.0

    # The H200 winner measured on A100 at 0.03 ms, where A100's own best is 0.02 ms.
    spec = get_spec("matmul")
    winner = spec.default_config(Vendor.NVIDIA)
    own = _others()[3]
    _add_trials(api.database, job_id, [winner, own], [0.03, 0.02], class_key=OTHER)
    matrix = api.call(
        "beta", "GET", "/v1/portability?kernel=matmul&problem=M=16,N=16,K=16,dtype=float16"
    )
    assert matrix.status_code == 200, matrix.text
    body = matrix.json()
    assert body["classes"] == [OTHER, CLASS_KEY]
    cells = {(c["source"], c["target"]): c for c in body["cells"]}
    assert round(cells[(CLASS_KEY, OTHER)]["loss_pct"], 6) == 50.0
    assert cells[(OTHER, CLASS_KEY)]["loss_pct"] is None
    assert cells[(OTHER, CLASS_KEY)]["note"] == f"not measured on {CLASS_KEY}"
    assert cells[(OTHER, OTHER)]["loss_pct"] == 0.0
    for bad in ("kernel=../etc", "kernel=nope", "kernel=matmul&objective=speed"):
        assert api.call("beta", "GET", f"/v1/portability?{bad}").status_code in (400, 422), bad
