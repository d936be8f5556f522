#!/usr/bin/env bash
# The prepared command for a lent GPU machine (no network; see ../shared/gpu/README.md):
#
#   bash benchmarks/gpu_session.sh LABEL [bench_gpu.py arguments ...]
#
# run from the checkout's root, with the wheels of benchmarks/gpu_carry.sh in .gpu/. It makes
# NVIDIA's OpenCL library visible (an ICD file where the driver installed none), installs the
# wheels into $HOME/site unless feinsum's dependencies already import, lists the devices, and
# runs benchmarks/bench_gpu.py (default --budget 8) into $OUT/LABEL/ (OUT: the device tool's
# result folder, else ./gpu-out): rows.jsonl and table.md as each workload completes, the
# database, its records as JSON lines (LABEL/records.jsonl, for db/) and the whole log;
# then benchmarks/gpu_overlap.py, the same DG configurations at several element counts
# (LABEL/overlap.jsonl; OVERLAP_TIMEOUT seconds, default 60; OVERLAP_ARGS its arguments);
# then the DG programs through arraycontext + pytato, whole against their einsums alone
# (benchmarks/bench_arraycontext.py --whole-only: LABEL/arraycontext.txt; WHOLE_E elements,
# default 20000; WHOLE_TIMEOUT seconds, default 150); then benchmarks/bench_lazy_index.py
# (LABEL/lazy_index.jsonl; LAZY_N points, default 1e5, 0 skips it; LAZY_TIMEOUT seconds,
# default 120). GPU_STAGES picks the stages, in this order (default
# "bench overlap programs lazy");
# SESSION_SECONDS (default 570: the device tool gives a command 600) bounds the whole
# script: a stage runs only while 30 s remain, and never past the bound. A session of
# two calls: `bash benchmarks/gpu_session.sh first --budget 8`, then
# `GPU_STAGES="programs lazy" bash benchmarks/gpu_session.sh second`. PYTHON picks the
# interpreter (default python3), FEINSUM_GPU_CARRY the wheels' folder (default .gpu).
# GPU_PACK=1: the device tool returns at most 8 files, so the results go to
# $GPU_WORK/LABEL (default /tmp/feinsum-gpu) and are packed into $OUT/LABEL.tar.gz after
# every stage (a killed command returns the stages it finished).
set -uo pipefail
cd "$(dirname "$0")/.."
LABEL=${1:?usage: gpu_session.sh LABEL [bench_gpu.py arguments ...]}
shift
case "$LABEL" in
    */*|.*|"") echo "gpu_session: LABEL names a folder under \$OUT: no '/', no leading '.'" >&2
               exit 2 ;;
esac
PY=${PYTHON:-python3}
START=$SECONDS
LIMIT=${SESSION_SECONDS:-570}
STAGES=" ${GPU_STAGES:-bench overlap programs lazy} "
# seconds a stage may take: at most $1, and what is left of the session but 10 s
allowed() { local left=$((LIMIT - (SECONDS - START) - 10)); echo $(( $1 < left ? $1 : left )); }
OUT_DIR=${OUT:-$PWD/gpu-out}
if [ -n "${GPU_PACK:-}" ]; then
    DEST=${GPU_WORK:-/tmp/feinsum-gpu}/$LABEL
else
    DEST=$OUT_DIR/$LABEL
fi
mkdir -p "$DEST" "$OUT_DIR"
pack() {
    [ -n "${GPU_PACK:-}" ] || return 0
    tar czf "$OUT_DIR/$LABEL.tar.gz.part" -C "$DEST" . \
        && mv "$OUT_DIR/$LABEL.tar.gz.part" "$OUT_DIR/$LABEL.tar.gz"
}
LOG=$DEST/session.log
say() { echo "[gpu_session $(date +%T)] $*" | tee -a "$LOG"; }

# pip's pyopencl reads the ICD files of OCL_ICD_VENDORS; NVIDIA's driver may have installed
# its OpenCL library without one: then a private vendors folder names it
NV=$(ls /usr/lib/libnvidia-opencl.so.1 /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 \
     2>/dev/null | head -n1)
if [ -z "${OCL_ICD_VENDORS:-}" ]; then
    if [ -z "$NV" ] || grep -qs nvidia-opencl /etc/OpenCL/vendors/*.icd; then
        [ -d /etc/OpenCL/vendors ] && export OCL_ICD_VENDORS=/etc/OpenCL/vendors
    else
        ICDS=$DEST/icd
        mkdir -p "$ICDS" && cp /etc/OpenCL/vendors/*.icd "$ICDS/" 2>/dev/null
        echo "$NV" > "$ICDS/nvidia.icd"
        export OCL_ICD_VENDORS=$ICDS
        say "NVIDIA's OpenCL library $NV had no ICD file: OCL_ICD_VENDORS=$ICDS"
    fi
fi

export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
WHEELS=${FEINSUM_GPU_CARRY:-.gpu}
if ! "$PY" -c "import loopy, pyopencl, sqlalchemy, optuna" 2>/dev/null; then
    if ! compgen -G "$WHEELS/*.whl" > /dev/null; then
        say "feinsum's dependencies do not import with $PY and $WHEELS/ has no wheels: run" \
            "benchmarks/gpu_carry.sh before the session and carry .gpu"
        exit 2
    fi
    SITE=$HOME/site
    say "installing $(ls "$WHEELS"/*.whl | wc -l) wheels into $SITE"
    "$PY" -m pip install -q --no-index --no-deps --target "$SITE" "$WHEELS"/*.whl >> "$LOG" 2>&1 \
        || { say "pip could not install the wheels (the log above says why)"; exit 2; }
    export PYTHONPATH=$SITE:$PYTHONPATH
fi

"$PY" -m feinsum.cli devices 2>&1 | tee "$DEST/devices.txt" >> "$LOG"
rc=0
if [[ $STAGES == *" bench "* ]]; then
    say "bench_gpu.py --out $DEST $*"
    timeout "$(allowed 100000)" "$PY" benchmarks/bench_gpu.py --out "$DEST" "$@" 2>&1 \
        | tee -a "$LOG"
    rc=${PIPESTATUS[0]}
    if [ -f "$DEST/bench-gpu.sqlite" ]; then
        "$PY" -m feinsum.cli db export --db "$DEST/bench-gpu.sqlite" "$DEST/records.jsonl" \
            >> "$LOG" 2>&1 || say "could not export the records (the database stays)"
    fi
    say "bench_gpu.py exited $rc"
    pack
fi
# stage NAME DEFAULT_SECONDS FILE COMMAND...: run while 30 s of the session remain,
# bounded; its output into the log and FILE
stage() {
    local name=$1 want=$2 file=$3 secs
    shift 3
    secs=$(allowed "$want")
    if [ "$secs" -lt 30 ]; then
        say "$name skipped: $((LIMIT - (SECONDS - START))) s of the session's $LIMIT left"
        return
    fi
    say "$name (at most $secs s): $*"
    timeout "$secs" "$@" 2>&1 | tee -a "$LOG" "$file"
    [ "${PIPESTATUS[0]}" = 0 ] || say "$name did not finish (the log says why)"
    pack
}
# the same DG configurations at several element counts: the model's DRAM/compute overlap
if [[ $STAGES == *" overlap "* ]]; then
    read -r -a OVERLAP_EXTRA <<< "${OVERLAP_ARGS:-}"
    stage gpu_overlap.py "${OVERLAP_TIMEOUT:-60}" "$DEST/overlap.txt" \
        "$PY" benchmarks/gpu_overlap.py --out "$DEST/overlap.jsonl" "${OVERLAP_EXTRA[@]}"
fi
# whole DG programs through arraycontext + pytato against their einsums alone
if [[ $STAGES == *" programs "* ]]; then
    stage bench_arraycontext.py "${WHOLE_TIMEOUT:-150}" "$DEST/arraycontext.txt" \
        "$PY" benchmarks/bench_arraycontext.py --whole-only --elements "${WHOLE_E:-20000}" \
        --repeat 5
fi
# the nearest neighbour with and without lazy_index, points in three orders (LAZY_N=0: not)
LAZY_N=${LAZY_N:-100000}
if [[ $STAGES == *" lazy "* ]] && [ "$LAZY_N" != 0 ]; then
    stage bench_lazy_index.py "${LAZY_TIMEOUT:-120}" "$DEST/lazy_index.txt" \
        "$PY" benchmarks/bench_lazy_index.py --n "$LAZY_N" --json "$DEST/lazy_index.jsonl"
fi
say "done in $((SECONDS - START)) s (bench_gpu.py: exit $rc); results in $DEST"
pack
exit "$rc"
