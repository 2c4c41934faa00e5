"""The JSON routes the web page needs beyond the API of :mod:`orchestrator.server.app`.

* ``GET /v1/whoami``: the token's team and scope (what the page may offer, e.g. cancel);
* ``GET /v1/jobs/{id}/studies/{study}``: one study analysed (:func:`orchestrator.app.insights.study_analysis`);
* ``GET /v1/jobs/{id}/studies/{study}/trials``: its trials paged and sorted by the database;
* ``GET /v1/portability?kernel=&problem=&objective=``: best config of class A run on class B;
* ``GET /v1/drift?kernel=&problem=&device_class=&objective=&triton=&limit=``: a stored best's
  re-timings (:func:`orchestrator.app.drift.key_drift`).

Same auth as every other route (a read token), same JSON errors; another team's job is the
same 404 as a missing one.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from db import Objective, TrialOutcome
from orchestrator.app import drift, insights
from orchestrator.app.views import View
from orchestrator.server.auth import ReadPrincipal

router = APIRouter(tags=["page"])

Id = Annotated[int, Path(ge=1, le=2**62)]


def _json(value: View | dict[str, object]) -> Response:
    body = value.to_dict() if isinstance(value, View) else value
    return Response(json.dumps(body, separators=(",", ":")), media_type="application/json")


@router.get("/v1/whoami")
def whoami(request: Request, principal: ReadPrincipal) -> Response:
    """The token's team and scope, and whether it may submit and cancel (its team's, or any)."""
    return _json(
        {
            "token_id": principal.token_id,
            "team": principal.team,
            "scope": principal.scope.value,
            "can_cancel": principal.scope.value != "read",
            "admin": principal.admin,
        },
    )


@router.get("/v1/jobs/{job_id}/studies/{study_id}")
def study(job_id: Id, study_id: Id, request: Request, principal: ReadPrincipal) -> Response:
    """A study: convergence, outcomes, best config against the default and the median trial,
    parameter importance."""
    view = insights.study_analysis(
        request.app.state.database, job_id, study_id, team=principal.team_filter()
    )
    return _json(view)


@router.get("/v1/jobs/{job_id}/studies/{study_id}/trials")
def trials(
    job_id: Id,
    study_id: Id,
    request: Request,
    principal: ReadPrincipal,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
    sort: Annotated[str, Query(pattern="^(id|time|outcome|compile)$")] = "id",
    order: Annotated[str, Query(pattern="^(asc|desc)$")] = "asc",
    outcome: TrialOutcome | None = None,
) -> Response:
    """One page of a study's trials, sorted by id, time, outcome or compile time."""
    page = insights.trial_page(
        request.app.state.database,
        job_id,
        study_id,
        team=principal.team_filter(),
        limit=limit,
        offset=offset,
        sort=sort,
        order=order,
        outcome=outcome.value if outcome is not None else None,
    )
    return _json(page)


@router.get("/v1/portability")
def portability(
    request: Request,
    _: ReadPrincipal,
    kernel: Annotated[str, Query(min_length=1, max_length=200)],
    problem: Annotated[
        str | None, Query(max_length=1000, description="e.g. M=64,N=64,K=64,dtype=float16")
    ] = None,
    objective: Objective = Objective.KERNEL,
) -> Response:
    """Each device class's best config run on every other class, as a loss against that class's
    own best (from trials measured on both; every team's, like best configs)."""
    request.app.state.api.kernel(kernel)
    return _json(
        insights.portability(
            request.app.state.database, kernel=kernel, problem=problem, objective=objective
        ),
    )


@router.get("/v1/drift")
def key_drift(
    request: Request,
    _: ReadPrincipal,
    kernel: Annotated[str, Query(min_length=1, max_length=200)],
    problem: Annotated[str, Query(min_length=1, max_length=1000)],
    device_class: Annotated[str, Query(min_length=1, max_length=200)],
    objective: Objective = Objective.KERNEL,
    triton: Annotated[str | None, Query(max_length=16)] = None,
    limit: Annotated[int, Query(ge=1, le=drift.MAX_POINTS)] = 1000,
) -> Response:
    """A stored best's drift: its newest re-timings with the noise floor, the stack each ran
    in, and where it regressed after which change (every team's, like best configs)."""
    api = request.app.state.api
    return _json(
        drift.key_drift(
            request.app.state.database,
            kernel=api.kernel(kernel),
            problem=problem,
            device_class=device_class,
            objective=objective,
            triton=triton,
            limit=limit,
            allowed=api.modules,
        )
    )
