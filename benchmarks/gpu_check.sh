#!/usr/bin/env bash
# The GPU check, in phases that each fit 8 minutes on the 16-core GPU test machine (no network,
# onnxruntime's CPU build, no PyCUDA: it is built from the sdist in benchmarks/_wheels/):
#
#     PHASE=1 bash benchmarks/gpu_check.sh   # correctness
#     PHASE=2 bash benchmarks/gpu_check.sh   # speed
#     bash benchmarks/gpu_check.sh           # both, one after the other
#
# Phase 1: PyCUDA from local sdists; libonnxopt_ops built; the kernel images built for this
#   device's architecture (and the compute_90 PTX); the device probed (a check with no usable
#   device fails rather than skipping every test); the GPU tests (pytest -m gpu tests/kernels
#   tests/runtime): every kernel against float64 for every mask kind, head size and dtype, and
#   the native library end to end, its CPU-provider ops staging through device memory (this
#   ONNX Runtime has no CUDA provider) on whole models.
# Phase 2: benchmarks/gpu_kernels.py (attention against PyTorch's SDPA, norms and activations
#   against copy bandwidth) and benchmarks/bridge_overhead.py (the library's per-op cost, and two
#   sessions in two threads on idle cores).
#
# What comes back ($OUT, default benchmarks/_work/gpu_check): summary.json (each step, its exit
# code and seconds; "ok") and logs.tar.gz (every step's log and the benchmarks' tables): two
# files. The exit code is 0 only when every step passed.
#
# DRY_RUN=1 runs the plumbing without a GPU (each step echoes what it would run); CI does, to
# check the phases, the summary and the file count. Other environment: PYTHON (default
# python3), QUICK=1 (benchmark: fewer sizes), LIBCUDA_DIR (a folder with libcuda.so, if
# PyCUDA's build cannot find one), TEST_ARGS (more pytest arguments, e.g. "-n 8" for
# pytest-xdist), TEST_TIMEOUT and BENCH_TIMEOUT (seconds for the test step and for each
# benchmark step, so that a slow step still leaves the summary and the logs to come back).
#
# Building PyCUDA takes minutes of device time, so the wheel it builds is a third file in $OUT:
# put it in benchmarks/_wheels/ (untracked) and the next fresh machine installs it instead.
#
# benchmarks/_wheels/ is filled once, on a machine with network access (cp312, x86-64 Linux):
#     pip download --no-deps --no-binary pycuda pycuda -d benchmarks/_wheels
#     pip download --no-deps --only-binary :all: --python-version 3.12 --implementation cp \
#         --abi cp312 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
#         --platform manylinux_2_28_x86_64 \
#         pytools platformdirs typing_extensions siphash24 mako markupsafe -d benchmarks/_wheels
# (PyCUDA's build needs setuptools, wheel and numpy already installed: --no-build-isolation.)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
OUT=${OUT:-$ROOT/benchmarks/_work/gpu_check}
PHASE=${PHASE:-all}
DRY=${DRY_RUN:-0}
WHEELS=$ROOT/benchmarks/_wheels
mkdir -p "$OUT"
LOGS=$(mktemp -d)
STEPS=$LOGS/steps.tsv
: >"$STEPS"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

# step NAME COMMAND...: run it (its output to $LOGS/NAME.log and the terminal), record the result.
step() {
    local name=$1
    shift
    local start=$SECONDS rc
    echo "# $name"
    if [ "$DRY" = 1 ]; then
        echo "dry run: $*" | tee "$LOGS/$name.log"
        rc=0
    else
        "$@" 2>&1 | tee "$LOGS/$name.log"
        rc=${PIPESTATUS[0]}
    fi
    printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - start))" >>"$STEPS"
}

environment() {
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
    nvcc --version | tail -n 2
    "$PY" -c "import sys, numpy, onnxruntime; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'onnxruntime', onnxruntime.__version__)"
    "$PY" -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name())" || true
    if ! "$PY" -c "import onnx, ml_dtypes" 2>/dev/null; then
        "$PY" -m pip install -q --no-index --find-links "$WHEELS" onnx ml_dtypes
    fi
}

install_pycuda() {
    if "$PY" -c "import pycuda.driver" 2>/dev/null; then
        echo "pycuda already importable"
        return 0
    fi
    local missing=()
    for pkg in pycuda pytools platformdirs typing_extensions siphash24 mako markupsafe; do
        if ! ls "$WHEELS" 2>/dev/null | grep -qi "^${pkg//_/[-_]}-"; then
            if ! "$PY" -c "import ${pkg}" 2>/dev/null; then missing+=("$pkg"); fi
        fi
    done
    if ((${#missing[@]})); then
        echo "pycuda: missing from $WHEELS and not installed: ${missing[*]}"
        echo "pycuda: see the download commands at the top of benchmarks/gpu_check.sh"
        return 1
    fi
    # PyCUDA's build reads ~/.aksetup-defaults.py: point it at this toolkit, skip cuRAND, and
    # give the linker a libcuda.so (the toolkit's stub, or the driver's libcuda.so.1).
    local cfg
    cfg=$(mktemp -d)
    local cuda_root="" libdirs candidate
    for candidate in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda \
        "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")" /usr/local/cuda-*; do
        if [ -n "$candidate" ] && [ -f "$candidate/include/cuda.h" ]; then
            cuda_root=$candidate
            break
        fi
    done
    if [ -z "$cuda_root" ]; then
        echo "pycuda: no CUDA toolkit with include/cuda.h found (set CUDA_HOME)"
        return 1
    fi
    mkdir -p "$cfg/lib"
    local drv
    drv=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
    [ -n "$drv" ] && ln -sf "$drv" "$cfg/lib/libcuda.so"
    libdirs="'$cuda_root/lib64', '$cuda_root/lib64/stubs', '$cuda_root/targets/x86_64-linux/lib', '$cuda_root/targets/x86_64-linux/lib/stubs', '$cfg/lib'"
    [ -n "${LIBCUDA_DIR:-}" ] && libdirs="$libdirs, '$LIBCUDA_DIR'"
    cat >"$cfg/.aksetup-defaults.py" <<EOF
CUDA_ROOT = '$cuda_root'
CUDA_ENABLE_CURAND = False
CUDADRV_LIB_DIR = [$libdirs]
CUDART_LIB_DIR = [$libdirs]
EOF
    local built=$cfg/wheel rc=0
    if ls "$WHEELS"/pycuda-*-cp*.whl >/dev/null 2>&1; then
        echo "pycuda: installing the wheel an earlier check built"
    else
        # One compiler per extension module at a time (distutils' build_ext --parallel).
        printf '[build_ext]\nparallel = 16\n' >"$cfg/parallel.cfg"
        echo "pycuda: building from $WHEELS (CUDA_ROOT=$cuda_root) ..."
        HOME=$cfg DIST_EXTRA_CONFIG=$cfg/parallel.cfg "$PY" -m pip wheel --no-deps \
            --no-build-isolation --no-index -w "$built" "$WHEELS"/pycuda-*.tar.gz \
            >"$LOGS/pycuda_build.log" 2>&1 || rc=$?
        tail -n 3 "$LOGS/pycuda_build.log"
        cp "$built"/pycuda-*.whl "$OUT"/ 2>/dev/null || true
    fi
    ((rc)) || HOME=$cfg "$PY" -m pip install --no-index --find-links "$WHEELS" \
        --find-links "$built" --no-build-isolation pycuda >"$LOGS/pycuda_install.log" 2>&1 || rc=$?
    tail -n 5 "$LOGS/pycuda_install.log"
    if ((rc)) || ! "$PY" -c "import pycuda.driver"; then
        echo "pycuda: install FAILED (see $LOGS/pycuda_install.log); continuing without it"
        return 1
    fi
    echo "pycuda: installed"
}

build_library() {
    "$PY" onnxopt/runtime/_native/build.py onnxopt/runtime/_native/libonnxopt_ops.so
}

# This device's SASS and the PTX: what it loads, in a fraction of the time of every target.
build_images() {
    "$PY" - <<'PYEOF'
from onnxopt.runtime.cuda import compiler, images, metadata, probe
cc = probe.limits().compute_capability
targets = tuple(dict.fromkeys([compiler.arch_for(cc), compiler.PTX_ARCH]))
built = compiler.build_images(metadata.kernels_dir(), images.image_dir(), targets=targets)
spills = sum(r.spill_stores + r.spill_loads for i in built for r in i.resources.values())
print(f"built {len(built)} images for {targets}; {spills} bytes of register spills")
raise SystemExit(1 if spills else 0)
PYEOF
}

# Without a usable device every GPU test would skip and this check would look green: fail.
probe_device() {
    "$PY" - <<'PYEOF'
from onnxopt.runtime.cuda import images, metadata, probe
from onnxopt.runtime.cuda_available import device_unavailable_reason
reason = device_unavailable_reason()
print("device:", "ok" if reason is None else f"NOT USABLE ({reason})")
if reason is None:
    limits = probe.limits()
    print("device limits:", limits)
    for family in metadata.FAMILIES:
        found = images.find(family, limits.compute_capability)
        print(f"  {family}: loads", found.target if found else "NOTHING SHIPPED")
raise SystemExit(0 if reason is None else 1)
PYEOF
}

summary() {
    "$PY" - "$STEPS" "$OUT/summary.json" "$PHASE" "$DRY" <<'PYEOF'
import json, sys
steps = [dict(zip(("name", "rc", "seconds"), line.rstrip("\n").split("\t")))
         for line in open(sys.argv[1]) if line.strip()]
for s in steps:
    s["rc"], s["seconds"] = int(s["rc"]), int(s["seconds"])
ok = bool(steps) and all(s["rc"] == 0 for s in steps)
json.dump({"phase": sys.argv[3], "dry_run": sys.argv[4] == "1", "ok": ok, "steps": steps},
          open(sys.argv[2], "w"), indent=1)
print(f"gpu_check: {'ok' if ok else 'FAILED'}: " +
      ", ".join(f"{s['name']} rc={s['rc']} {s['seconds']}s" for s in steps))
raise SystemExit(0 if ok else 1)
PYEOF
}

quick=()
[ "${QUICK:-0}" = 1 ] && quick=(--quick)
step environment environment
if [ "$PHASE" = 1 ] || [ "$PHASE" = all ]; then
    step pycuda install_pycuda
    step library build_library
    step images build_images
    step device probe_device
    # shellcheck disable=SC2086 - TEST_ARGS is a list of words
    step gpu_tests timeout "${TEST_TIMEOUT:-0}" "$PY" -m pytest -q -m gpu tests/kernels \
        tests/runtime -rs -p no:cacheprovider ${TEST_ARGS:-}
fi
if [ "$PHASE" = 2 ] || [ "$PHASE" = all ]; then
    step kernels_vs_torch timeout "${BENCH_TIMEOUT:-0}" "$PY" benchmarks/gpu_kernels.py \
        --out "$LOGS" ${quick[@]+"${quick[@]}"}
    step library_overhead timeout "${BENCH_TIMEOUT:-0}" "$PY" benchmarks/bridge_overhead.py
fi
summary
status=$?
tar -czf "$OUT/logs.tar.gz" -C "$LOGS" .
rm -rf "$LOGS"
echo "gpu_check: results in $OUT (summary.json, logs.tar.gz)"
exit $status
