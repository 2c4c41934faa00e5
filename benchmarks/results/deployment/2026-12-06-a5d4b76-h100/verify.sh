#!/usr/bin/env bash
# Re-profile with the bundles pulled in this folder's run, on the code of the commit that runs this
# script: each bundle gets `batch_fields` (what `tunefleet pull` writes since c6cacf1) and a new
# digest, then `profile --with-bundle` at the points the rules changed: llama-3.2-1b decode batch
# 64 (nearest-entry rule), prefill seq 16384 (float32 twin's attention), qwen3-30b-a3b decode
# batch 1 and 64 (launch-bound eager policy). Run from the repository root; OUT=folder.
set -u
D=benchmarks/results/deployment/2026-12-06-a5d4b76-h100
for model in llama qwen; do
  mkdir -p "/tmp/verify/$model"
  python3 - "$D/$model/bundle" "/tmp/verify/$model" <<'PY'
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
done
P="python3 -m orchestrator profile --runs 10 --mode both --dtype bfloat16 --trace-forwards 1"
timeout 70 $P llama-3.2-1b --layers 16 --phase decode --batch 64 --seq 512 \
  --with-bundle /tmp/verify/llama --out "$OUT/llama-decode" > "$OUT/llama-decode.txt" 2>&1
timeout 100 $P llama-3.2-1b --layers 16 --phase prefill --batch 1 --seq 16384 \
  --with-bundle /tmp/verify/llama --out "$OUT/llama-16384" > "$OUT/llama-16384.txt" 2>&1
timeout 70 $P qwen3-30b-a3b --layers 4 --phase decode --batch 1,64 --seq 512 \
  --with-bundle /tmp/verify/qwen --out "$OUT/qwen-decode" > "$OUT/qwen-decode.txt" 2>&1
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
for report in sorted(Path(sys.argv[1]).glob("*/report.json")):
    for r in json.loads(report.read_text()).get("with_bundle", {}).get("rows", []):
        print(report.parent.name, r["phase"], r["batch"], r["mode"], r["baseline_ms"], r["tuned_ms"],
              r["change"], r["swapped_all_ms"], (r["policy"] or "")[:40], r["refused"])
PY
cd "$OUT" && tar czf verify.tgz ./*/report.json ./*.txt && rm -rf llama-decode llama-16384 qwen-decode
