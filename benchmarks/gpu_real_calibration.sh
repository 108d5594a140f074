#!/usr/bin/env bash
# A real model's mismatch budget on a GPU host, in one go: the OPD budget of SmolLM2-135M-
# Instruct (teacher) and a student derived from it (every second of its 30 layers kept, so
# the pair shares the tokenizer and chat template and the student has accuracy to win back),
# on GSM8K (each step's problems from the official train split, accuracy on the test split).
#
#   benchmarks/gpu_real_calibration.sh            # the calibration (see STEPS, SEEDS, LEVELS)
#   TIMING_ONLY=1 benchmarks/gpu_real_calibration.sh   # two training steps, timed, and stop
#
# Needs the product's environment (`make run`'s .venv, or PYTHON=...) with the models'
# packages (`requirements-models.txt`: the SmolLM2 GGUF and GSM8K) and a CUDA torch; nothing
# is downloaded. Every step is a product command; results (JSON) go to $OUT (default
# var/gpu-real). docs/benchmarks/real-model.md gives the time one step takes on a CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
MODELS=${MODELS:-var/models}
OUT_DIR=${OUT:-var/gpu-real}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-300}            # optimizer steps per training run
BATCH=${BATCH:-64}             # sequences per step
TOKENS=${TOKENS:-256}          # response tokens (GSM8K's worked answers run to a few hundred)
EVAL=${EVAL:-500}              # held-out GSM8K test problems per evaluation
SEEDS=${SEEDS:-3}              # seeds per level (more, up to 6, where a level is inconclusive)
LEVELS=${LEVELS:-10,100,1000}  # injected multiples of the BF16 unit; bisected to x1.5 between
SMOLLM2=$MODELS/smollm2-135m-instruct
STUDENT=$MODELS/smollm2-135m-every2
# SmolLM2-135M-Instruct solves 2.5 % of GSM8K (1 of 40 test problems, greedy, 256 tokens,
# measured here): too little to teach, so with it as the teacher the calibration most likely
# ends `uninformative` after its BF16 baseline (it trains no level then). A larger SmolLM2
# (360M or 1.7B Instruct, the same tokenizer) as GGUF makes the pair one that learns:
#   TEACHER_GGUF=/path/SmolLM2-1.7B-Instruct-Q8_0.gguf benchmarks/gpu_real_calibration.sh
if [ -n "${TEACHER_GGUF:-}" ]; then TEACHER=$MODELS/teacher-$(basename "$TEACHER_GGUF" .gguf); else TEACHER=$SMOLLM2; fi
mkdir -p "$OUT_DIR"
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() or '$DEVICE' == 'cpu' else 'no CUDA device visible')"
[ -d "$SMOLLM2" ] || "$PY" -m workers import-gguf --packaged smollm2 --out "$SMOLLM2"
[ -d "$TEACHER" ] || "$PY" -m workers import-gguf --gguf "$TEACHER_GGUF" --out "$TEACHER" --task gsm8k \
    --max-new-tokens "$TOKENS"
[ -d "$STUDENT" ] || "$PY" -m workers derive-student --teacher "$SMOLLM2" --out "$STUDENT" --keep every:2

# Two steps, timed (the first includes loading): what one step of the calibration costs here.
printf 'dtype: bf16\n' > "$OUT_DIR/bf16.yaml"  # the BF16 rollout engine, the baseline's
/usr/bin/env time -v "$PY" -m workers train --model "$STUDENT" --teacher "$TEACHER" --config "$OUT_DIR/bf16.yaml" \
    --task gsm8k --method opd \
    --steps 2 --batch-size "$BATCH" --max-new-tokens "$TOKENS" --eval-every 0 --eval-prompts 8 \
    --device "$DEVICE" --json > "$OUT_DIR/two_steps.json" 2> "$OUT_DIR/two_steps.log"
tail -n 25 "$OUT_DIR/two_steps.log" | grep -E "Elapsed|Maximum resident" || true
[ -n "${TIMING_ONLY:-}" ] && exit 0

# The budget: a BF16 baseline that must learn first (else the calibration ends uninformative),
# then the ladder, more seeds where a level is inconclusive, bisection to x1.5.
"$PY" -m workers calibrate --model "$STUDENT" --teacher "$TEACHER" --task gsm8k --method opd \
    --levels "$LEVELS" --seeds "$SEEDS" --steps "$STEPS" --batch-size "$BATCH" --max-new-tokens "$TOKENS" \
    --eval-prompts "$EVAL" --eval-every 0 --device "$DEVICE" --json > "$OUT_DIR/calibration.json"
"$PY" -c "import json; r = json.load(open('$OUT_DIR/calibration.json')); print({k: r.get(k) for k in ('status', 'budget', 'rule', 'baseline')})"
