#!/usr/bin/env bash
# Re-profile recorded points with a recorded bundle folder, on the code of the current tree:
#   bash benchmarks/deployment/reprofile.sh BUNDLES OUT MODEL LAYERS PHASE BATCHES SEQ
# Each bundle of BUNDLES is copied to OUT/bundles with the `batch_fields` that `tunefleet pull`
# writes today (from the kernel's spec) and a new digest: the recorded decisions, read under
# today's rules. Then `profile MODEL --with-bundle OUT/bundles` at PHASE, BATCHES (comma list) and
# SEQ, eager and graph, into OUT/report (report.json; traces and plots removed) and OUT/profile.txt.
# Run from the repository root with PYTHONPATH set; exit 2 on a missing argument or folder.
set -u
if (( $# != 7 )) || [ ! -d "$1" ]; then
  echo "usage: reprofile.sh BUNDLES OUT MODEL LAYERS PHASE BATCHES SEQ (BUNDLES a folder)" >&2
  exit 2
fi
bundles=$1 out=$2 model=$3 layers=$4 phase=$5 batches=$6 seq=$7
mkdir -p "$out/bundles"
python3 - "$bundles" "$out/bundles" <<'PY' || exit 1
import json, sys
from pathlib import Path
from search_spaces import get_spec
from search_spaces.bundle import bundle_digest
src, dst = (Path(a) for a in sys.argv[1:])
for path in sorted(src.glob("*.json")):
    doc = json.loads(path.read_text())
    doc.pop("digest", None)
    doc["batch_fields"] = list(get_spec(doc["kernel"]).schema.batch_names)
    doc["digest"] = bundle_digest(doc)
    (dst / path.name).write_text(json.dumps(doc, indent=1))
PY
python3 -m orchestrator profile "$model" --layers "$layers" --phase "$phase" --batch "$batches" \
  --seq "$seq" --runs 10 --mode both --dtype bfloat16 --trace-forwards 1 \
  --with-bundle "$out/bundles" --out "$out/report" > "$out/profile.txt" 2>&1
status=$?
rm -rf "$out/report/traces" "$out/report"/*.png
exit $status
