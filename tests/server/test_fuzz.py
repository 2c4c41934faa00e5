"""Fuzz the real server from its own OpenAPI document (schemathesis): valid and invalid requests,
with an admin token and with none, never get a 5xx. Bounded: a few hundred cases in all."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tests.server.conftest import MATMUL_PROBLEMS, Api, seed_best

CASES_PER_OPERATION = 20
# Streams until the job ends; tested directly in test_api.py.
SKIPPED = {"GET /v1/jobs/{job_id}/events"}


@pytest.fixture
def backend() -> str:
    return "sqlite"


def test_no_server_errors_from_schema_driven_requests(api: Api) -> None:
    seed_best(api.database, "alpha", MATMUL_PROBLEMS)
    schema = schemathesis.openapi.from_url(f"{api.url}/openapi.json")
    operations = [r.ok() for r in schema.get_all_operations()]
    labels = {op.label for op in operations}
    assert {"POST /v1/jobs", "GET /v1/bundles/{kernel}", "POST /v1/tokens"} <= labels
    token = api.tokens["admin"][1]
    ran = 0
    for operation in operations:
        if operation.label in SKIPPED:
            continue
        cases = st.one_of(
            operation.as_strategy(GenerationMode.POSITIVE),
            operation.as_strategy(GenerationMode.NEGATIVE),
        )

        @settings(
            max_examples=CASES_PER_OPERATION,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=cases, authorized=st.booleans())
        def fuzz(case: schemathesis.Case, authorized: bool) -> None:
            nonlocal ran
            headers = {"Authorization": f"Bearer {token}"} if authorized else {}
            response = case.call(base_url=api.url, headers=headers, timeout=30)
            ran += 1
            assert response.status_code < 500, (case.method, case.formatted_path, response.text)
            if response.status_code >= 400:
                assert set(response.json()) == {"error", "detail"}, response.text

        fuzz()
    assert ran >= 100
