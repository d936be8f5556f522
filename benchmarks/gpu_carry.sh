#!/usr/bin/env bash
# Fill .gpu/ (git-ignored) with the wheels a lent GPU machine without network needs, for the
# device tool's `carry`: feinsum's dependencies built for its Python (FEINSUM_GPU_WHEELS,
# default ../shared/gpu/wheels-cp312) and the arraycontext/pytato wheels (FEINSUM_WHEELS,
# default ../shared/wheels). Then, on the device: `bash benchmarks/gpu_session.sh first`.
set -euo pipefail
cd "$(dirname "$0")/.."
GPU_WHEELS=${FEINSUM_GPU_WHEELS:-../shared/gpu/wheels-cp312}
AC_WHEELS=${FEINSUM_WHEELS:-../shared/wheels}
if ! compgen -G "$GPU_WHEELS/*.whl" > /dev/null; then
    echo "gpu_carry: no wheels in $GPU_WHEELS; set FEINSUM_GPU_WHEELS to the folder of" \
         "feinsum's dependencies built for the GPU machine's Python" >&2
    exit 2
fi
git check-ignore -q .gpu/ || { echo "gpu_carry: .gpu/ must be git-ignored" >&2; exit 2; }
rm -rf .gpu && mkdir -p .gpu
cp "$GPU_WHEELS"/*.whl .gpu/
if compgen -G "$AC_WHEELS/*.whl" > /dev/null; then
    cp "$AC_WHEELS"/*.whl .gpu/
fi
echo "gpu_carry: $(ls .gpu | wc -l) wheels, $(du -sh .gpu | cut -f1) in .gpu/ (carry: [\".gpu\"])"
