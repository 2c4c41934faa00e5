"""Bad input through the real server: traversal forms in paths and queries, names off the
allow-lists, module kernels the operator did not allow, unknown fields, wrong types, huge bodies."""

from __future__ import annotations

import http.client
import json
import os
import sys
from pathlib import Path

import pytest

from tests.server.conftest import Api, ServerFactory, job_body

EVIL = "tests.server._evil_kernel"


@pytest.fixture
def backend() -> str:
    """These checks happen before any query: SQLite is enough (test_api.py runs both backends)."""
    return "sqlite"


TRAVERSALS = [
    "/v1/kernels/../../etc/passwd/space?device_class=H200",
    "/v1/kernels/..%2f..%2fetc%2fpasswd/space?device_class=H200",
    "/v1/kernels/%2e%2e%2f%2e%2e%2fetc/space?device_class=H200",
    "/v1/kernels/%252e%252e%252fetc/space?device_class=H200",
    "/v1/kernels/%25252e%25252e%25252f/space?device_class=H200",
    "/v1/kernels/..%5c..%5cetc/space?device_class=H200",
    "/v1/kernels/matmul\\..\\x/space?device_class=H200",
    "/v1/bundles/..%2f..%2ftmp%2fx",
    "/v1/bundles/matmul?device_class=../../etc/passwd",
    "/v1/bundles/matmul?device_class=%2e%2e%2f%2e%2e%2fetc",
    "/v1/bundles/matmul?device_class=%252e%252e%252fetc",
    "/v1/bundles/matmul?format=..%2f..%2fnative",
    "/v1/bundles/matmul?format=%5c%5cserver%5cshare",
    "/v1/best?kernel=matmul&device_class=..%5c..%5cwindows",
    "/v1/jobs?team=..%2f..%2fetc",
    "/v1/jobs?team=%252e%252e%252f",
    "/v1/kernels/matmul/space?device_class=%00",
]

BAD_NAMES = [
    ("/v1/bundles/notakernel", "unknown kernel"),
    ("/v1/bundles/os:path", "not allowed"),
    ("/v1/bundles/matmul?device_class=a%2Fb", "device class"),
    ("/v1/best?kernel=matmul&device_class=%2Fetc%2Fpasswd", "device class"),
    ("/v1/best?kernel=%2Fetc%2Fpasswd", "unknown kernel"),
    ("/v1/jobs?team=a%2Fb", "team"),
    ("/v1/jobs?kernel=subprocess:run", "not allowed"),
    ("/v1/kernels/os:system/space?device_class=H200", "not allowed"),
    ("/v1/drift?kernel=os:system&problem=M%3D1&device_class=cpu", "not allowed"),
]


def _raw_get(api: Api, target: str) -> tuple[int, dict[str, object]]:
    """GET ``target`` byte for byte (httpx would normalize dot segments away)."""
    conn = http.client.HTTPConnection("127.0.0.1", api.server.port, timeout=30)
    try:
        conn.putrequest("GET", target, skip_accept_encoding=True)
        conn.putheader("Authorization", f"Bearer {api.tokens['admin'][1]}")
        conn.endheaders()
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def _files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")}


@pytest.mark.parametrize("target", TRAVERSALS)
def test_traversal_forms_get_400(api: Api, target: str, tmp_path: Path) -> None:
    before = _files_under(tmp_path.parent)
    status, body = _raw_get(api, target)
    assert status == 400, (target, body)
    assert "bad request target" in str(body["error"])
    assert _files_under(tmp_path.parent) == before


@pytest.mark.parametrize(("target", "says"), BAD_NAMES)
def test_names_off_the_allow_lists_get_400(api: Api, target: str, says: str) -> None:
    status, body = _raw_get(api, target)
    assert status == 400, (target, body)
    assert says in str(body["error"])


def test_a_module_kernel_is_never_imported_unless_allowed(
    serve: ServerFactory, tmp_path: Path
) -> None:
    marker = tmp_path / "imported"
    os.environ["TUNEFLEET_EVIL_MARKER"] = str(marker)
    try:
        api = serve()
        body = job_body(kernel=f"{EVIL}:SPEC")
        r = api.call("alpha", "POST", "/v1/jobs", json=body)
        assert r.status_code == 400, r.text
        assert "--allow-kernel-module" in r.json()["error"]
        assert EVIL not in sys.modules and not marker.exists()
        for kernel in ("os:system", "builtins:eval", "search_spaces.kernels.matmul:SPEC"):
            assert (
                api.call("alpha", "POST", "/v1/jobs", json=job_body(kernel=kernel)).status_code
                == 400
            )
        assert (
            api.call("alpha", "GET", f"/v1/kernels/{EVIL}:SPEC/space?device_class=H200").status_code
            == 400
        )
        drift = api.call(
            "alpha",
            "GET",
            "/v1/drift",
            params={"kernel": f"{EVIL}:SPEC", "problem": "M=64", "device_class": "cpu"},
        )
        assert drift.status_code == 400, drift.text
        assert EVIL not in sys.modules and not marker.exists()

        allowed = serve(allow_kernel_modules=["search_spaces.kernels.matmul"])
        body = job_body(kernel="search_spaces.kernels.matmul:SPEC")
        r = allowed.call("alpha", "POST", "/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        # Allowing one module allows neither its parent nor its siblings.
        sibling = job_body(kernel="search_spaces.kernels.rmsnorm:SPEC")
        assert allowed.call("alpha", "POST", "/v1/jobs", json=sibling).status_code == 400
    finally:
        del os.environ["TUNEFLEET_EVIL_MARKER"]


def test_a_job_names_only_the_devices_the_server_serves(
    serve: ServerFactory, tmp_path: Path
) -> None:
    landscape = tmp_path / "landscape.json"
    landscape.write_text("{}")
    api = serve(served_devices=[f"replay:{landscape}"])
    for device in ("replay:/etc/passwd", f"replay:{tmp_path}/other.json", "cuda", "replay:"):
        r = api.call("alpha", "POST", "/v1/jobs", json=job_body(devices=[device]))
        assert r.status_code == 400, (device, r.text)
        assert "not served here" in r.json()["error"]
    ok = api.call("alpha", "POST", "/v1/jobs", json=job_body(devices="interpreter"))
    assert ok.status_code == 201, ok.text


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (job_body(kernel_path="/etc/passwd"), "kernel_path"),
        (job_body(trials="many"), "trials"),
        (job_body(trials=True), "trials"),
        (job_body(trials=0), "trials"),
        (job_body(priority=10**6), "priority"),
        (job_body(problems=[]), "problems"),
        (job_body(problems=[{"M": [1, 2]}]), "problems"),
        (job_body(objective="wallclock"), "objective"),
        (job_body(minutes=-1), "minutes"),
        ({"problems": ["M=16,N=16,K=16,dtype=float16"]}, "kernel"),
        ([job_body()], "body"),
    ],
)
def test_unknown_fields_and_wrong_types_get_422(api: Api, body: object, says: str) -> None:
    r = api.call("alpha", "POST", "/v1/jobs", json=body)
    assert r.status_code == 422, r.text
    assert says in r.json()["error"], r.json()


@pytest.mark.parametrize(
    ("who", "path", "body", "says"),
    [
        ("alpha", "/v1/jobs", job_body(kernel="matmul\x00"), "kernel"),
        ("alpha", "/v1/jobs", job_body(kernel="mat\ud800mul"), "kernel"),
        ("alpha", "/v1/jobs", job_body(team="alpha\x00"), "team"),
        ("alpha", "/v1/jobs", job_body(problems=["M=16\x00"]), "problems"),
        ("alpha", "/v1/jobs", job_body(problems=[{"M\x00": 16}]), "problems"),
        ("alpha", "/v1/jobs", job_body(devices=["interpreter\x00"]), "devices"),
        ("alpha", "/v1/jobs", job_body(sampler="\udfff"), "sampler"),
        ("admin", "/v1/tokens", {"team": "beta", "scope": "read", "name": "a\x00b"}, "name"),
        ("admin", "/v1/tokens", {"team": "be\x00ta", "scope": "read"}, "team"),
    ],
)
def test_nul_and_lone_surrogates_in_a_body_get_422(
    api: Api, who: str, path: str, body: object, says: str
) -> None:
    content = json.dumps(body).encode()  # ASCII: a lone surrogate as its JSON escape
    headers = {"Content-Type": "application/json"}
    r = api.call(who, "POST", path, content=content, headers=headers)
    assert r.status_code == 422, r.text
    assert says in r.json()["error"], r.json()


def test_a_spec_the_job_file_rules_refuse_gets_422(api: Api) -> None:
    for body, says in (
        (job_body(problems=["M=0,N=16,K=16,dtype=float16"]), "problem 1"),
        (job_body(sampler="annealing"), "sampler"),
        (job_body(objective="graph", devices="interpreter"), "graph"),
    ):
        r = api.call("alpha", "POST", "/v1/jobs", json=body)
        assert r.status_code == 422, r.text
        assert says in r.json()["error"]


def test_malformed_json_and_huge_bodies(api: Api) -> None:
    headers = {"Content-Type": "application/json"}
    r = api.call("alpha", "POST", "/v1/jobs", content=b"{not json", headers=headers)
    assert r.status_code == 422 and r.json()["error"]

    pad = "x" * (1 << 20)
    huge = json.dumps(job_body(seed=0) | {"sampler": pad}).encode()
    r = api.call("alpha", "POST", "/v1/jobs", content=huge, headers=headers)
    assert r.status_code == 413, r.text
    assert "at most 1048576 bytes" in r.json()["error"]

    def chunks() -> object:
        for _ in range(20):
            yield b" " * 65536  # 1.25 MiB in chunks, no Content-Length

    r = api.call("alpha", "POST", "/v1/jobs", content=chunks(), headers=headers)
    assert r.status_code == 413, r.text
    # Just under the limit is read and judged on its content.
    near = json.dumps(job_body()).encode().ljust((1 << 20) - 1)
    r = api.call("alpha", "POST", "/v1/jobs", content=near, headers=headers)
    assert r.status_code == 201, r.text
    listed = api.call("alpha", "GET", "/v1/jobs").json()
    assert listed["total"] == 1


def test_errors_are_json_with_the_right_status(api: Api) -> None:
    for method, path, status in (
        ("GET", "/v1/jobs/424242", 404),
        ("GET", "/v1/nothing", 404),
        ("DELETE", "/v1/jobs", 405),
        ("GET", "/v1/jobs/abc", 422),
        ("GET", "/v1/jobs?limit=0", 422),
        ("GET", "/v1/jobs?limit=100000", 422),
    ):
        r = api.call("alpha", method, path)
        assert r.status_code == status, (path, r.text)
        assert r.headers["content-type"] == "application/json"
        assert set(r.json()) == {"error", "detail"} and r.json()["error"]
