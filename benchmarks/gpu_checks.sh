#!/usr/bin/env bash
# The GPU checks a session runs when it is lent a CUDA machine, as one prepared script (the
# machine's time is short: about 15 minutes a session, start included). Run from the checkout's
# root there; everything it measures lands in $OUT (default ./gpu_out):
#
#   env.txt             GPU, driver, torch / transformers / cupy versions
#   gpu_tests.txt       `pytest -m gpu tests/rewrite` (the cupy verifier and the CUDA timing paths)
#   bench_e2e.json      `benchmarks.bench_e2e --device cuda` (its run "cuda"): eager, torch.compile,
#                       optimize_module and the rewrite backend, timed interleaved on the GPU (rows
#                       written as each model finishes, so a run cut short keeps what it measured)
#   e2e.log             its console output, the table at the end
#   <gpu>_measured.json `python -m rewrite.measurement`: a cost-model profile fitted on this GPU
#
# Packages the machine's image lacks (z3-solver, SQLAlchemy) travel as wheels in .whl/ (see
# ../shared/notes/gpu_machine.md). Budgets in seconds: E2E_S for the end-to-end benchmark,
# CAL_S for the calibration; MODELS picks bench_e2e's models, most telling first.
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
E2E_S=${E2E_S:-330}
CAL_S=${CAL_S:-90}
MODELS=${MODELS:-gpt2,resnet,bert,llama}
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 REWRITE_CACHE_DIR=/tmp/rewrite-cache
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nproc
  python3 -c "import torch, transformers, cupy; print('torch', torch.__version__, \
'transformers', transformers.__version__, 'cupy', cupy.__version__)"
} 2>&1 | tee "$OUT/env.txt"

timeout 90 python3 -m pytest -q -m gpu tests/rewrite -p no:cacheprovider 2>&1 | tail -15 \
  | tee "$OUT/gpu_tests.txt"

timeout "$E2E_S" python3 -m benchmarks.bench_e2e --device cuda --threads 0 --models "$MODELS" \
  --repeats 30 2>&1 | tee "$OUT/e2e.log"
cp benchmarks/results/bench_e2e.json "$OUT/" 2>/dev/null

gpu=$(python3 -c "import torch; print(torch.cuda.get_device_name().split()[1].lower())")
timeout "$CAL_S" python3 -m rewrite.measurement --out "$OUT/${gpu}_measured.json" 2>&1 | tail -20 \
  | tee "$OUT/calibrate.log"
echo "done"
