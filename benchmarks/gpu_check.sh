#!/usr/bin/env bash
# GPU check for the project's CUDA kernels, in one command, on a machine with a GPU, nvcc,
# Python 3.12 and torch but no network and no PyCUDA:
#
#     bash benchmarks/gpu_check.sh            # results in $OUT (default benchmarks/_work/gpu_check)
#
# 1. installs PyCUDA from the sdist in benchmarks/_wheels/ (offline; required: contexts, device
#    attributes, device memory and compiling for uncovered architectures go through it);
# 2. builds the shipped kernel images (onnxopt kernels --build: SASS sm_80/86/89/90 + PTX) and
#    checks the device loads one without compiling -> $OUT/kernels_build.txt;
# 3. runs the GPU tests (pytest -m gpu tests/kernels tests/runtime) -> $OUT/pytest_gpu.txt:
#    every attention specialisation at two head sizes of its bucket (8..256) against float64
#    for every mask kind (left/right padding, additive bias, causal, causal offset), fp16/bf16/
#    fp32; norms and activations; ORT's CUDA provider on whole models (IO binding, CUDA graph);
#    attention against PyTorch's SDPA (head sizes 32..256, with and without a bias);
# 4. runs benchmarks/gpu_kernels.py -> $OUT/gpu_kernels.md and .json (attention vs SDPA,
#    norms and activations vs copy bandwidth);
# 5. runs benchmarks/gpu_e2e.py (optimized models through ORT on our kernels) -> $OUT/gpu_e2e.md.
#
# benchmarks/_wheels/ is filled once, on a machine with network access (cp312, x86-64 Linux):
#     pip download --no-deps --no-binary pycuda pycuda -d benchmarks/_wheels
#     pip download --no-deps --only-binary :all: --python-version 3.12 --implementation cp \
#         --abi cp312 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
#         --platform manylinux_2_28_x86_64 \
#         pytools platformdirs typing_extensions siphash24 mako markupsafe -d benchmarks/_wheels
# (PyCUDA's build needs setuptools, wheel and numpy already installed: --no-build-isolation.)
#
# Environment: OUT (results folder), PYTHON (default python3), QUICK=1 (benchmark: fewer sizes),
# SKIP_PYCUDA=1, SKIP_BENCH=1, SKIP_E2E=1, LIBCUDA_DIR (a folder with libcuda.so, if the build cannot find one).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
OUT=${OUT:-$ROOT/benchmarks/_work/gpu_check}
WHEELS=$ROOT/benchmarks/_wheels
mkdir -p "$OUT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
status=0

{
    echo "# environment"
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv 2>&1
    nvcc --version 2>&1 | tail -n 2
    "$PY" -c "import sys, numpy; print('python', sys.version.split()[0], 'numpy', numpy.__version__)"
    "$PY" -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name())" 2>&1
} | tee "$OUT/environment.txt"

# --- 1. PyCUDA from local sdists ---------------------------------------------------------------
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
    echo "pycuda: building from $WHEELS (CUDA_ROOT=$cuda_root) ..."
    HOME=$cfg "$PY" -m pip install --no-index --find-links "$WHEELS" --no-build-isolation \
        pycuda >"$OUT/pycuda_install.log" 2>&1
    local rc=$?
    tail -n 5 "$OUT/pycuda_install.log"
    if ((rc)) || ! "$PY" -c "import pycuda.driver"; then
        echo "pycuda: install FAILED (see $OUT/pycuda_install.log); continuing without it"
        return 1
    fi
    echo "pycuda: installed"
}
if [ "${SKIP_PYCUDA:-0}" != 1 ]; then
    install_pycuda 2>&1 | tee "$OUT/pycuda.txt"
fi

# onnxopt itself needs onnx (and its ml_dtypes) besides onnxruntime: install them offline from
# benchmarks/_wheels if the image lacks them (drop their cp312 wheels there beforehand).
if ! "$PY" -c "import onnx, ml_dtypes, onnxruntime" 2>/dev/null; then
    "$PY" -m pip install -q --no-index --find-links "$WHEELS" onnx ml_dtypes 2>&1 | tail -n 2
    "$PY" -c "import onnx, ml_dtypes, onnxruntime" || echo "onnx/ml_dtypes/onnxruntime missing: onnxopt cannot run here"
fi

# --- 2. kernel images -----------------------------------------------------------------------------
echo "# kernel images"
"$PY" -c "import sys; from onnxopt.cli import main; sys.exit(main(['kernels', '--build']))" 2>&1 | tee "$OUT/kernels_build.txt"
if ((PIPESTATUS[0])); then status=1; fi

# --- 3. GPU tests --------------------------------------------------------------------------------
# Without a usable device every GPU test would skip and this check would look green: fail loudly.
if ! "$PY" -c "
import sys
from onnxopt.runtime.cuda import images, loader, metadata
from onnxopt.runtime.cuda_available import device_unavailable_reason
reason = device_unavailable_reason()
print('device:', 'ok' if reason is None else f'NOT USABLE ({reason})')
if reason is None:
    limits = loader.device_limits()
    cc = limits.compute_capability
    print('device limits:', limits)
    for family in metadata.FAMILIES:
        found = images.find(family, cc)
        print(f'  {family}: loads', found.target if found else 'NOTHING SHIPPED (compiles)')
sys.exit(0 if reason is None else 1)
"; then
    status=1
fi
echo "# GPU tests"
"$PY" -m pytest -q -m gpu tests/kernels tests/runtime -rs -p no:cacheprovider 2>&1 | tee "$OUT/pytest_gpu.txt"
test_rc=${PIPESTATUS[0]}
if ((test_rc)); then status=1; fi

quick=()
[ "${QUICK:-0}" = 1 ] && quick=(--quick)

# --- 4. benchmark ----------------------------------------------------------------------------------
if [ "${SKIP_BENCH:-0}" != 1 ]; then
    echo "# benchmark"
    "$PY" benchmarks/gpu_kernels.py --out "$OUT" ${quick[@]+"${quick[@]}"} 2>&1 | tee "$OUT/gpu_kernels.txt"
    if ((PIPESTATUS[0])); then status=1; fi
fi

# --- 5. end to end ---------------------------------------------------------------------------------
if [ "${SKIP_E2E:-0}" != 1 ]; then
    echo "# end to end"
    "$PY" benchmarks/gpu_e2e.py --out "$OUT" ${quick[@]+"${quick[@]}"} 2>&1 | tee "$OUT/gpu_e2e.txt"
    if ((PIPESTATUS[0])); then status=1; fi
fi

echo "gpu_check: tests rc=$test_rc, overall status=$status, results in $OUT"
exit $status
