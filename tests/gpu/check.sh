#!/usr/bin/env bash
# Ferry on a real NVIDIA GPU, end to end: detection, a training job with GPU telemetry,
# a preemption and its resume, and a job shorter than one sampling interval.
#
# CI has no GPU; run this where one is (it needs python3 with CUDA torch and
# nvidia-ml-py). Ferry's own pure-Python needs may come as wheels in .whl/. Results go
# to $OUT (default /tmp/ferry-gpu-check): check.log and one JSON per job.
#   bash tests/gpu/check.sh
# Set ACCEL= (empty) and ALLOW_CPU=1 to rehearse the script's plumbing without a GPU.
set -u
OUT=${OUT:-/tmp/ferry-gpu-check}
mkdir -p "$OUT"
exec > >(tee "$OUT/check.log") 2>&1
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
# wheels in .whl/ supply what the interpreter lacks (pydantic, on a machine that has torch)
if ! "$PY" -c "import pydantic, pathspec" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/ferry-site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/ferry-site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export FERRY_HOME=${FERRY_HOME_CHECK:-/tmp/ferry-gpu-home}
rm -rf "$FERRY_HOME"
ferry() { "$PY" -m ferry.cli.main "$@"; }
ACCEL=${ACCEL-H200:1}
acc=()
[ -n "$ACCEL" ] && acc=(--accelerator "$ACCEL")
cd tests/gpu
section() { printf '\n=== %s (%s)\n' "$1" "$(date +%T)"; }

section "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
"$PY" -c "import torch, pynvml; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" || true

section "1. a training job on the GPU, followed"
STEPS=${TRAIN_STEPS:-600} ferry run "${acc[@]}" --name gpu-train -- "$PY" train_gpu.py
echo "exit $?"
job=$(ferry jobs --json | "$PY" -c "import json,sys; print([j['id'] for j in json.load(sys.stdin) if j['name']=='gpu-train'][0])")
ferry status "$job"
ferry status "$job" --json > "$OUT/train-status.json"
ferry metrics "$job"
ferry metrics "$job" --json > "$OUT/train-metrics.json"
ferry outputs "$job"

section "2. preempted at step 150 or later, resumed"
job=$(STEPS=400 ferry run "${acc[@]}" --name gpu-preempt --detach -- "$PY" train_gpu.py 2>/dev/null)
for _ in $(seq 240); do
    step=$(ferry metrics "$job" --json 2>/dev/null | "$PY" -c "import json,sys
m={x['name']:x for x in json.load(sys.stdin)}; print(m.get('loss',{}).get('last_step') or 0)" 2>/dev/null)
    [ "${step:-0}" -ge 150 ] 2>/dev/null && break
    ferry status "$job" --json | grep -m1 '"status"' | grep -qE 'QUEUED|STARTING|RUNNING' || break
    sleep 0.5
done
echo "step seen: $step"
ferry preempt "$job"
ferry wait "$job"
echo "exit $?"
ferry status "$job"
ferry status "$job" --json > "$OUT/preempt-status.json"
ferry logs "$job" | grep -E "resumed|notice|device|done|Ferry|ferry" | head -20

section "3. a job shorter than one sampling interval"
ferry run "${acc[@]}" --name gpu-short -- "$PY" -c \
    "import torch; x = torch.ones(4096, 4096, device='cuda' if torch.cuda.is_available() else 'cpu'); print(float((x @ x).sum()))"
echo "exit $?"
job=$(ferry jobs --json | "$PY" -c "import json,sys; print([j['id'] for j in json.load(sys.stdin) if j['name']=='gpu-short'][0])")
ferry status "$job" --json > "$OUT/short-status.json"
ferry metrics "$job"

section "4. ferry top / plot on the GPU job"
job=$(ferry jobs --json | "$PY" -c "import json,sys; print([j['id'] for j in json.load(sys.stdin) if j['name']=='gpu-train'][0])")
ferry plot "$job" || true
section "end"
