// LayerNorm / RMSNorm over the last dimension, with the residual add optionally folded in.
//
// Semantics (NumPy definition: onnxopt/reference/norms.py::layer_norm / rms_norm):
//   v   = x + residual            (residual optional; v is rounded to T, as a T tensor would be)
//   sum = v                       (written only when sum_out is not null)
//   LayerNorm: y = (v - mean(v)) / sqrt(var(v) + eps) * gamma + beta   (biased variance)
//   RMSNorm:   y = v / sqrt(mean(v^2) + eps) * gamma + beta
//   gamma / beta may be null (treated as 1 / 0). All arithmetic in fp32.
//
// One block per row; each thread keeps up to MAXIT vectors of VEC elements in registers, so the
// row is read from global memory once. Statistics are two exact reductions over registers
// (mean, then sum of squared deviations), which avoids the cancellation of sum/sumsq.
//
// Launch: grid = (rows), block = (threads) with threads % 32 == 0, threads <= 1024 and
// ceil((N / VEC) / threads) <= MAXIT; N % VEC == 0 and 16-byte aligned pointers when VEC > 1.
// No dynamic shared memory. No host synchronisation or allocation.

#include "common.cuh"

namespace ln {

using onnxopt::block_sum;
using onnxopt::load_vec;
using onnxopt::round_to;
using onnxopt::store_vec;

template <typename T, int VEC, int MAXIT>
__device__ __forceinline__ void forward(const T* __restrict__ x, const T* __restrict__ residual,
                                        const T* __restrict__ gamma, const T* __restrict__ beta,
                                        T* __restrict__ y, T* __restrict__ sum_out, int N,
                                        float eps, int rms) {
    __shared__ float red_a[32];
    __shared__ float red_b[32];
    const int nvec = N / VEC;
    const size_t base = (size_t)blockIdx.x * N;
    const T* xr = x + base;

    float v[MAXIT][VEC];
    float acc = 0.f;
#pragma unroll
    for (int it = 0; it < MAXIT; ++it) {
        const int i = threadIdx.x + it * blockDim.x;
        if (i < nvec) {
            load_vec<T, VEC>(v[it], xr + i * VEC);
            if (residual != nullptr) {
                float r[VEC];
                load_vec<T, VEC>(r, residual + base + i * VEC);
#pragma unroll
                for (int e = 0; e < VEC; ++e) v[it][e] = round_to<T>(v[it][e] + r[e]);
                if (sum_out != nullptr) store_vec<T, VEC>(sum_out + base + i * VEC, v[it]);
            }
#pragma unroll
            for (int e = 0; e < VEC; ++e) acc += rms ? v[it][e] * v[it][e] : v[it][e];
        } else {
#pragma unroll
            for (int e = 0; e < VEC; ++e) v[it][e] = 0.f;
        }
    }
    const float inv_n = 1.f / (float)N;
    float mean = 0.f, var;
    if (rms) {
        var = block_sum(acc, red_a) * inv_n;  // mean of squares
    } else {
        mean = block_sum(acc, red_a) * inv_n;
        float sq = 0.f;
#pragma unroll
        for (int it = 0; it < MAXIT; ++it) {
            if (threadIdx.x + it * blockDim.x < nvec) {
#pragma unroll
                for (int e = 0; e < VEC; ++e) {
                    const float d = v[it][e] - mean;
                    sq += d * d;
                }
            }
        }
        var = block_sum(sq, red_b) * inv_n;
    }
    const float rstd = rsqrtf(var + eps);

#pragma unroll
    for (int it = 0; it < MAXIT; ++it) {
        const int i = threadIdx.x + it * blockDim.x;
        if (i < nvec) {
            float gm[VEC], bt[VEC], out[VEC];
            if (gamma != nullptr) {
                load_vec<T, VEC>(gm, gamma + i * VEC);
            } else {
#pragma unroll
                for (int e = 0; e < VEC; ++e) gm[e] = 1.f;
            }
            if (beta != nullptr) {
                load_vec<T, VEC>(bt, beta + i * VEC);
            } else {
#pragma unroll
                for (int e = 0; e < VEC; ++e) bt[e] = 0.f;
            }
#pragma unroll
            for (int e = 0; e < VEC; ++e) out[e] = (v[it][e] - mean) * rstd * gm[e] + bt[e];
            store_vec<T, VEC>(y + base + i * VEC, out);
        }
    }
}

}  // namespace ln

#define LN_ENTRY(NAME, TYPE, VEC, MAXIT)                                                       \
    extern "C" __global__ void __launch_bounds__(1024)                                        \
        NAME(const TYPE* __restrict__ x, const TYPE* __restrict__ residual,                   \
             const TYPE* __restrict__ gamma, const TYPE* __restrict__ beta,                   \
             TYPE* __restrict__ y, TYPE* __restrict__ sum_out, int N, float eps, int rms) {   \
        ln::forward<TYPE, VEC, MAXIT>(x, residual, gamma, beta, y, sum_out, N, eps, rms);     \
    }

// Entry names: ln_<dtype>_v<VEC>; MAXIT listed in layer_norm.json.
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_ln_f32_v4)
LN_ENTRY(ln_f32_v4, float, 4, 8)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_ln_f32_v1)
LN_ENTRY(ln_f32_v1, float, 1, 8)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_ln_f16_v8)
LN_ENTRY(ln_f16_v8, __half, 8, 4)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_ln_f16_v1)
LN_ENTRY(ln_f16_v1, __half, 1, 8)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_ln_bf16_v8)
LN_ENTRY(ln_bf16_v8, __nv_bfloat16, 8, 4)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_ln_bf16_v1)
LN_ENTRY(ln_bf16_v1, __nv_bfloat16, 1, 8)
#endif
