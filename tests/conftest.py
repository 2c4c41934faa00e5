"""Shared test fixtures: Triton's interpreter on CPU, hand-built device limits, and the storage
backends (every storage test runs on SQLite and on PostgreSQL). Captures are indexed in a file of
the test run (``TUNEFLEET_CAPTURE_INDEX``), never the user's.

PostgreSQL tests get a fresh schema each (``search_path`` set through the URL's ``options``), dropped
afterwards. Without a reachable server they are skipped, except under CI where they fail.
"""

import contextlib
import os
import tempfile

# Before anything imports triton: the interpreter runs kernels on CPU tensors. setdefault lets a GPU
# run opt out with TRITON_INTERPRET=0.
os.environ.setdefault("TRITON_INTERPRET", "1")
# Captures the tests index (and the processes they start) go to a file of this run, not the user's.
os.environ["TUNEFLEET_CAPTURE_INDEX"] = os.path.join(
    tempfile.mkdtemp(prefix="tunefleet-test-"), "captures.json"
)

import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from db import Database
from search_spaces.space import DeviceLimits, Vendor

# NVIDIA H200 (Hopper, sm_90): 227 KiB opt-in shared memory per block, 64 Ki registers per block,
# 132 SMs (CUDA C++ Programming Guide, compute capability 9.0 table; cudaGetDeviceProperties).
H200 = DeviceLimits(
    vendor=Vendor.NVIDIA,
    name="NVIDIA H200",
    arch="sm_90",
    shared_mem_per_block=232448,
    registers_per_block=65536,
    warp_size=32,
    multiprocessors=132,
    max_threads_per_block=1024,
)

# AMD Instinct MI300X (CDNA3, gfx942): 64 KiB LDS per workgroup, wavefront 64, 304 CUs (ROCm docs,
# "AMD GPU specifications" table); 65536 registers per block and 1024 threads per block as
# hipGetDeviceProperties reports them (regsPerBlock, maxThreadsPerBlock).
MI300X = DeviceLimits(
    vendor=Vendor.AMD,
    name="AMD Instinct MI300X",
    arch="gfx942",
    shared_mem_per_block=65536,
    registers_per_block=65536,
    warp_size=64,
    multiprocessors=304,
    max_threads_per_block=1024,
)

# Triton's interpreter has no hardware limits; it gets an H200-sized budget so that configs valid on
# the GPUs we tune for are valid here too.
CPU = DeviceLimits(
    vendor=Vendor.CPU,
    name="cpu",
    arch="interpreter",
    shared_mem_per_block=232448,
    registers_per_block=65536,
    warp_size=32,
    multiprocessors=1,
    max_threads_per_block=1024,
)


@pytest.fixture
def h200_limits() -> DeviceLimits:
    return H200


@pytest.fixture
def mi300x_limits() -> DeviceLimits:
    return MI300X


@pytest.fixture
def cpu_limits() -> DeviceLimits:
    return CPU


#: The test files that take longest, longest first: collected first so that under pytest-xdist
#: (pyproject's addopts) they start first and no worker is left running one of them alone at the end.
SLOWEST_FIRST = (
    "tests/faults/test_lease_faults.py",
    "tests/orchestrator/commands/test_capture_tune.py",
    "tests/workers/test_profiling_cpu.py",
    "tests/orchestrator/commands/test_cli.py",
    "tests/orchestrator/run/test_kept_workers.py",
    "tests/faults/test_cli_faults.py",
    "tests/server/test_page.py",
    "tests/orchestrator/test_scheduler.py",
    "tests/orchestrator/run/test_cluster.py",
    "tests/server/test_serve.py",
    "tests/faults/test_ray_faults.py",
    "tests/search_spaces/test_ranks.py",
    "tests/faults/test_text_faults.py",
    "tests/orchestrator/run/test_vendor_paths.py",
    "tests/server/test_health.py",
    "tests/search_spaces/test_space.py",
    "tests/db/test_storage.py",
    "tests/faults/test_driver_faults.py",
    "tests/server/test_end_to_end.py",
    "tests/orchestrator/study/test_learned_sampler.py",
    "tests/server/test_client_remote.py",
    "tests/db/test_migrations.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture(scope="session")
def landscapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """Device name -> its synthetic matmul landscapes (tests/orchestrator/landscapes: two devices,
    two problems each), written once per test process for every test that replays them."""
    from tests.orchestrator.landscapes.make_landscapes import write_all

    return write_all(tmp_path_factory.mktemp("landscapes"))


PG_URL = os.environ.get("TUNEFLEET_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[Engine]:
    """An autocommit engine on the test PostgreSQL server, or skip (fail under CI) without one."""
    engine = Database(PG_URL).engine.execution_options(isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError as e:
        reason = f"PostgreSQL at {PG_URL} unreachable ({str(e.orig).splitlines()[0]})"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must run the postgres tests")
        pytest.skip(f"{reason}; set TUNEFLEET_TEST_PG")
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def empty_url(
    backend: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[str]:
    """URL of an empty database of ``backend`` that only this test sees."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'tunefleet.db'}"
        return
    admin: Engine = request.getfixturevalue("pg_admin")
    schema = f"t_{secrets.token_hex(6)}"
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    url = sa.make_url(PG_URL).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))


@pytest.fixture
def db(empty_url: str) -> Iterator[Database]:
    """A migrated database of ``backend``."""
    database = Database(empty_url)
    database.upgrade()
    yield database
    database.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def ray_head(env: dict[str, str], temp_dir: Path | None = None) -> Iterator[str]:
    """``host:port`` of a real two-CPU Ray head on 127.0.0.1 started with ``env`` (``ray start
    --head --block``; in Ray's default temp folder unless ``temp_dir``), until the block ends.
    It is stopped through its process group, so no other Ray on the machine is touched (``ray
    stop`` would end every Ray of this user, another test's included)."""
    port = free_port()
    head = subprocess.Popen(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
         f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats",
         *([f"--temp-dir={temp_dir}"] if temp_dir else [])],
        env={**env, "RAY_AUTH_MODE": "disabled"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            assert head.poll() is None, f"ray start exited {head.returncode}"
            assert time.monotonic() < deadline, "the Ray head did not listen within 120 s"
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(head.pid, signal.SIGKILL)  # the head, its GCS, raylet and workers: one group
        head.wait()
