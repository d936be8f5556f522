#!/usr/bin/env bash
# Tune every reference workload of ../shared/workloads.md on this machine's default OpenCL
# device (PoCL on the CPU) with the CLI, then export the records into db/ for shipping.
#
#   scripts/ship_records.sh                   # revalidate db/, tune everything, write db/<device>.jsonl
#   scripts/ship_records.sh --revalidate-only # only revalidate db/*.jsonl in place (no device)
#   scripts/ship_records.sh --dry-run         # print the commands only
#   BUDGET=60 scripts/ship_records.sh         # fewer configurations per workload
#
# First the shipped records are revalidated (`feinsum db revalidate db/*.jsonl`): records
# whose generated code the current recipes (and loopy) still produce are kept under the
# current recipe versions, the others retired; no device, no timing. Then the records go to
# one database (SHIP_DB, default ~/.cache/feinsum-ship/records.sqlite; the shipped file of
# this device is imported into it first, and it is revalidated too) and the autotuner never
# measures a configuration twice, so an interrupted run picks up where it stopped and kept
# records are not measured again. Kernel reductions are tuned at M = N = 1e5 (their long
# axes are length symbols: the records are reused along them). Takes about 10 minutes a
# workload at the default budget on the 2-core reference machine.
#
# The DG family and the tensor contractions are tuned from their subscripts, the kernel
# reductions from the kernels of benchmarks/workloads.py (--kernel FILE.py:NAME).
set -euo pipefail
cd "$(dirname "$0")/.."

FEINSUM=${FEINSUM:-.venv/bin/feinsum}
SHIP_DB=${SHIP_DB:-${XDG_CACHE_HOME:-$HOME/.cache}/feinsum-ship/records.sqlite}
BUDGET=${BUDGET:-100}
# the kernel reductions run ~1e10 pairs a call at 1e5 x 1e5: give them fewer configurations
RBUDGET=${RBUDGET:-$BUDGET}
# per-workload wall-clock cap (seconds; empty: none)
TIME_LIMIT=${TIME_LIMIT:-}
LIMIT=()
[ -z "$TIME_LIMIT" ] || LIMIT=(--time-limit "$TIME_LIMIT")
DRY=0
ONLY_REVALIDATE=0
case "${1:-}" in
    --dry-run) DRY=1 ;;
    --revalidate-only) ONLY_REVALIDATE=1 ;;
    "") ;;
    *) echo "usage: $0 [--dry-run | --revalidate-only]" >&2; exit 2 ;;
esac

run() {
    echo "+ $*"
    [ "$DRY" = 1 ] || "$@"
}

# {{{ revalidate the shipped records (and the ship database): no device, no timing

shopt -s nullglob
shipped=(db/*.jsonl)
[ "${#shipped[@]}" = 0 ] || run "$FEINSUM" db revalidate "${shipped[@]}"
[ "$ONLY_REVALIDATE" = 0 ] || exit 0

device=$(.venv/bin/python -c 'import re, feinsum
i = feinsum.device_info(feinsum.get_device())
print(re.sub(r"[^A-Za-z0-9]+", "-", i.name).strip("-").lower())')
mkdir -p "$(dirname "$SHIP_DB")"
[ ! -f "db/$device.jsonl" ] || run "$FEINSUM" db import --db "$SHIP_DB" "db/$device.jsonl"
[ ! -f "$SHIP_DB" ] || run "$FEINSUM" db revalidate --db "$SHIP_DB"

# }}}

tune() { run "$FEINSUM" tune --db "$SHIP_DB" --budget "$BUDGET" "${LIMIT[@]}" --quiet "$@"; }
# at 1e5 x 1e5 the untransformed kernel takes minutes a call and the tensorized peers need
# 40 GB: the reductions are tuned without them (benchmarks/ compares them at 1e4)
rtune() { run "$FEINSUM" tune --db "$SHIP_DB" --budget "$RBUDGET" "${LIMIT[@]}" --no-baseline --no-peers --quiet "$@"; }

# {{{ DG operator family (float64; E = 50,000), each also batched over 4 fields

DG_SIZES="x=3,r=3,i=35,j=35,e=E"
for rows in 1 4; do
    batch=()
    [ "$rows" = 1 ] || batch=(--rows "$rows")
    tune "ij,ej->ei" -s i=35,j=35,e=E --dtype float64 -l E=50000 "${batch[@]}"
    tune "xre,rij,xej->ei" -s "$DG_SIZES" --dtype float64 -l E=50000 "${batch[@]}"
    tune "xre,rij,ej->xei" -s "$DG_SIZES" --dtype float64 -l E=50000 "${batch[@]}"
    tune "ifj,fe,fej->ei" -s i=35,f=4,j=15,e=E --dtype float64 -l E=50000 "${batch[@]}"
done

# }}}

# {{{ tensor contractions (float32)

tune "ik,kj->ij" -s i=1024,k=1024,j=1024 --dtype float32
tune "ijkl,mi->mjkl" -s i=64,j=64,k=64,l=64,m=64 --dtype float32
tune "ijk,jkl->il" -s i=512,j=64,k=64,l=512 --dtype float32

# }}}

# {{{ kernel reductions (float32, D = 3), tuned at M = N = 1e5
# benchmarks/workloads.py defines one loopy kernel per reduction for `--kernel`.

KERNELS=benchmarks/workloads.py
if [ -f "$KERNELS" ]; then
    for name in gaussian gaussian4 softmin nearest; do
        rtune --kernel "$KERNELS:$name" -l M=100000 -l N=100000
    done
    rtune --kernel "$KERNELS:fewrows" -l N=1000000
else
    echo "skipping the kernel reductions: $KERNELS does not exist yet" >&2
fi

# }}}

# {{{ export for shipping

run "$FEINSUM" db export --db "$SHIP_DB" "db/$device.jsonl"
echo "wrote db/$device.jsonl: commit it (see db/README.md)"

# }}}
# vim: foldmethod=marker
