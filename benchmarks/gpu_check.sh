#!/usr/bin/env bash
# GPU host check (minutes): real FP8 (torch._scaled_mm) vs emulated FP8 multiples on the demo
# student, and the admission measurement's wall time on a random Qwen2.5-1.5B-shaped model.
# Needs only the host's torch + transformers (+ pydantic, pyyaml, numpy, safetensors); no vLLM,
# no Django, nothing downloaded.  Results: JSON on stdout and in ${OUT:-.}/gpu_check.json.
# SMOLLM2=1 adds check 3: FP8 on SmolLM2-135M-Instruct with GSM8K (imports the packaged GGUF into
# ${SMOLLM2_DIR:-var/models/smollm2-135m-instruct} first; needs the `gguf` package and the models'
# packages, found through OPDWEB_PACKAGED_DIR or .venv/models).
# REAL=1 then runs the real model's calibration in the same go (benchmarks/gpu_real_calibration.sh:
# SmolLM2-135M-Instruct and a student derived from it on GSM8K; hours, in the product's .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT_DIR=${OUT:-.}
mkdir -p "$OUT_DIR"
"$PY" - <<'PYCHECK'
import importlib, sys
missing = [m for m in ("torch", "transformers", "pydantic", "yaml", "numpy", "safetensors", "tokenizers", "re2")
           if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_check: missing Python modules on this host: {', '.join(missing)}")
import torch
if not torch.cuda.is_available():
    sys.exit("gpu_check: no CUDA device visible")
print(f"gpu_check: torch {torch.__version__}, {torch.cuda.get_device_name(0)}, capability {torch.cuda.get_device_capability(0)}", file=sys.stderr)
PYCHECK
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ "${SMOLLM2:-0}" = "1" ]; then
    SMOLLM2_DIR=${SMOLLM2_DIR:-var/models/smollm2-135m-instruct}
    [ -d "$SMOLLM2_DIR" ] || "$PY" -m workers import-gguf --packaged smollm2 --out "$SMOLLM2_DIR" >&2
    set -- --smollm2 "$SMOLLM2_DIR" "$@"
fi
"$PY" benchmarks/gpu_check.py --demo-dir "${DEMO_DIR:-var/toy/demo-gpu}" --out "$OUT_DIR/gpu_check.json" "$@"
if [ "${REAL:-0}" = "1" ]; then
    OUT="$OUT_DIR/real" benchmarks/gpu_real_calibration.sh
fi
