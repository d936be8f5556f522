#!/usr/bin/env bash
# A whole GPU lease in one device command (docs/gpu-measurements.rst): three labelled runs of
# benchmarks/gpu_session.sh, each packed into $OUT/LABEL.tar.gz as it ends (GPU_PACK=1):
#
#   first     bench_gpu.py --budget 8, every reference workload at the reference lengths
#   gpulen    bench_gpu.py --budget 4 --lengths gpu on the DG family (E = 1e6), GPU peers only
#   programs  gpu_overlap.py (the same DG configurations at E = 5e4, 2e5 and 1e6: the
#             model's DRAM/compute overlap; PLAN_OVERLAP_SECONDS, default 45), then the DG
#             programs through arraycontext + pytato, whole against their einsums
#
# PLAN_SECONDS (default 560: the device tool gives a command 600) is shared 50/23/27 between
# them; PLAN_BENCH_ARGS replaces the bench stages' workload arguments (e.g. "--quick --only
# local", for a smoke test on the CPU), PLAN_OVERLAP_ARGS gpu_overlap.py's (e.g.
# "--elements 300 2000 --only local"). Run from the checkout's root with the wheels of
# benchmarks/gpu_carry.sh in .gpu/ (carry [".gpu"]):
#
#   bash benchmarks/gpu_plan.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export GPU_PACK=1 PYTHONUNBUFFERED=1
TOTAL=${PLAN_SECONDS:-560}
FIRST=$((TOTAL * 50 / 100))
GPULEN=$((TOTAL * 23 / 100))
PROGRAMS=$((TOTAL - FIRST - GPULEN))
read -r -a EXTRA <<< "${PLAN_BENCH_ARGS:-}"

SESSION_SECONDS=$FIRST GPU_STAGES=bench bash benchmarks/gpu_session.sh first --budget 8 \
    --time-budget $((FIRST - 40)) "${EXTRA[@]}"
rc=$?
# the wheels the first stage installed serve the others
[ -d "$HOME/site" ] && export PYTHONPATH=$HOME/site${PYTHONPATH:+:$PYTHONPATH}
if [ ${#EXTRA[@]} -gt 0 ]; then
    GPULEN_ARGS=("${EXTRA[@]}")
else
    GPULEN_ARGS=(--lengths gpu --only local divergence gradient face_mass)
fi
SESSION_SECONDS=$GPULEN GPU_STAGES=bench bash benchmarks/gpu_session.sh gpulen --budget 4 \
    --gpu-peers-only --time-budget $((GPULEN - 30)) "${GPULEN_ARGS[@]}"
OVERLAP=${PLAN_OVERLAP_SECONDS:-45}
SESSION_SECONDS=$PROGRAMS GPU_STAGES="overlap programs" OVERLAP_TIMEOUT=$OVERLAP \
    OVERLAP_ARGS=${PLAN_OVERLAP_ARGS:-} WHOLE_TIMEOUT=$((PROGRAMS - OVERLAP - 10)) \
    bash benchmarks/gpu_session.sh programs
exit "$rc"
