#!/usr/bin/env bash
# Everything a lent GPU machine is for, in one call of the device tool (no spaCy there):
# build the extension for the chip, run the kernel tests (the CUDA ones included), and time
# the kernels, the whole model (float32 and bf16 autocast) and pretraining. Results and the
# log go to $OUT (at most 8 files come back); commit them under benchmarks/results/.
#
#   device run:  bash scripts/gpu_session.sh            (about 6-8 minutes on an H100)
#   smoke test:  DEVICE=cpu QUICK=1 STEM=kernels_smoke OUT=/tmp/gs PY=.venv/bin/python bash scripts/gpu_session.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_session}
DEVICE=${DEVICE:-cuda}
QUICK=${QUICK:-0}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-16}
if [ "$DEVICE" = cuda ]; then export SPACY_ELMO_CUDA=1; fi
if [ "$QUICK" = 1 ]; then SHAPES="--batches 8 --lengths 20 --repeats 2"; else SHAPES="--batches 32 128 256 --lengths 20 50 --repeats 10"; fi
STEM=${STEM:-kernels_$DEVICE}
LOG="$OUT/gpu_session.log"

step() { echo; echo "=== $* ($(date +%T))"; "$@"; echo "=== exit $? : $1 ${2:-}"; }
{
  if [ "$DEVICE" = cuda ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv
  fi
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name(0))"
  step $PY setup.py -q build_ext --inplace
  $PY -c "from spacy_elmo.ops import fused; print('fused cuda:', fused.built_with_cuda(), 'cpu isa:', fused.cpu_isa())"
  step $PY -m pytest -q -p no:cacheprovider tests/ops
  step $PY benchmarks/kernels.py --device "$DEVICE" --whole-model $SHAPES --out "$STEM"
  if [ "$DEVICE" = cuda ]; then
    step $PY benchmarks/kernels.py --device cuda --whole-model --no-kernels --autocast bf16 $SHAPES --out "${STEM}_bf16"
  fi
  if [ "$QUICK" = 1 ]; then PRESETS="small"; else PRESETS="small original"; fi
  step $PY benchmarks/pretrain.py --device "$DEVICE" --presets $PRESETS --batch-size 128 --out "$OUT/pretrain_$DEVICE.json"
} 2>&1 | tee "$LOG"
for f in "$STEM" "${STEM}_bf16"; do cp benchmarks/results/$f.json benchmarks/results/$f.png "$OUT"/ 2>/dev/null; done
ls -la "$OUT"
