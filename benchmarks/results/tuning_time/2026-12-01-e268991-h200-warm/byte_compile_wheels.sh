#!/usr/bin/env bash
# Run by the device scripts (repo root, wheels in /tmp/site): the GPU machine sets
# PYTHONDONTWRITEBYTECODE=1 and the wheels go in with --no-compile, so every process would compile
# Ray, SQLAlchemy and Optuna from source at each start. Byte-compile them once, as a pip install would, and print how
# long a driver's imports then take (twice).
echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}"
TIMEFORMAT="compileall %R s"; time python3 -m compileall -q -j 0 /tmp/site > /dev/null
TIMEFORMAT="driver imports %R s"
for _ in 1 2; do time python3 -c "import orchestrator.cli, orchestrator.driver, ray, optuna"; done
