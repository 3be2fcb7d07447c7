// GroupNorm over groups of channels of an [N, C, *spatial] tensor, then an optional SiLU.
//
// Semantics (NumPy definition: onnxopt/reference/norms.py::group_norm):
//   X is [N, C, S] (S: the product of the spatial dims), C = groups * Cg. Each (n, g) is
//   normalised over its Cg * S contiguous elements:
//     y = (x - mean) / sqrt(var + eps) * gamma[c] + beta[c]      (biased variance)
//     silu != 0: y = y / (1 + exp(-y))
//   gamma / beta [C] may be null (treated as 1 / 0). Statistics and arithmetic in fp32.
//
// One block per (n, g): blockIdx.x = n * groups + g.
//   MAXIT > 0 (the group fits in registers): each thread keeps up to MAXIT vectors of VEC
//     elements, so X is read from global memory once; the mean and the centred variance are two
//     exact block reductions over the registers (no sum / sum-of-squares cancellation).
//   MAXIT == 0 (streaming, groups larger than that): the same two passes, and the output pass,
//     each read the group from memory (three reads of X; the later two mostly hit L2 when the
//     tensor fits there). Every thread keeps VEC separate fp32 partial sums.
//
// Launch: grid = (N * groups), block = (threads), threads % 32 == 0, threads <= 1024;
// MAXIT > 0: ceil(Cg * S / VEC / threads) <= MAXIT. VEC > 1: S % VEC == 0 (a vector never
// crosses a channel) and 16-byte aligned pointers. Cg * S <= 2^30 (int32 indexing inside a
// group). No dynamic shared memory. No host synchronisation or allocation.

#include "common.cuh"

namespace gn {

using onnxopt::block_sum;
using onnxopt::load_vec;
using onnxopt::store_vec;
using onnxopt::to_f32;

__device__ __forceinline__ float silu(float v) {
    // expf(-v) overflows to inf for v < -88: v / inf = -0, the right limit.
    return v / (1.f + expf(-v));
}

struct Group {
    size_t base;       // offset of the group's first element
    int first_channel;  // g * Cg
    int size;           // Cg * S
};

__device__ __forceinline__ Group this_group(int groups, int cg, int spatial) {
    const int size = cg * spatial;
    return {(size_t)blockIdx.x * (size_t)size, (int)(blockIdx.x % (unsigned)groups) * cg, size};
}

// y[e .. e + VEC) of the group from its values v (e: index inside the group; the VEC elements
// share one channel because S % VEC == 0).
template <typename T, int VEC>
__device__ __forceinline__ void write_out(T* __restrict__ y, const T* __restrict__ gamma,
                                          const T* __restrict__ beta, const Group& grp,
                                          int spatial, int e, const float (&v)[VEC],
                                          float mean, float rstd, int act) {
    float scale = rstd, shift = 0.f;
    if (gamma != nullptr || beta != nullptr) {
        const int c = grp.first_channel + e / spatial;
        if (gamma != nullptr) scale *= to_f32<T>(gamma[c]);
        if (beta != nullptr) shift = to_f32<T>(beta[c]);
    }
    float out[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        const float t = (v[k] - mean) * scale + shift;
        out[k] = act ? silu(t) : t;
    }
    store_vec<T, VEC>(y + grp.base + e, out);
}

// The group held in registers: one read of X.
template <typename T, int VEC, int MAXIT>
__device__ __forceinline__ void cached(const T* __restrict__ x, const T* __restrict__ gamma,
                                       const T* __restrict__ beta, T* __restrict__ y,
                                       const Group& grp, int spatial, float eps, int act) {
    __shared__ float red_a[32];
    __shared__ float red_b[32];
    const int nvec = grp.size / VEC;
    const T* xg = x + grp.base;

    float v[MAXIT][VEC];
    float acc = 0.f;
#pragma unroll
    for (int it = 0; it < MAXIT; ++it) {
        const int i = threadIdx.x + it * blockDim.x;
        if (i < nvec) {
            load_vec<T, VEC>(v[it], xg + i * VEC);
#pragma unroll
            for (int k = 0; k < VEC; ++k) acc += v[it][k];
        } else {
#pragma unroll
            for (int k = 0; k < VEC; ++k) v[it][k] = 0.f;
        }
    }
    const float inv_n = 1.f / (float)grp.size;
    const float mean = block_sum(acc, red_a) * inv_n;
    float sq = 0.f;
#pragma unroll
    for (int it = 0; it < MAXIT; ++it) {
        if (threadIdx.x + it * blockDim.x < nvec) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const float d = v[it][k] - mean;
                sq += d * d;
            }
        }
    }
    const float rstd = rsqrtf(block_sum(sq, red_b) * inv_n + eps);

#pragma unroll
    for (int it = 0; it < MAXIT; ++it) {
        const int i = threadIdx.x + it * blockDim.x;
        if (i < nvec) {
            write_out<T, VEC>(y, gamma, beta, grp, spatial, i * VEC, v[it], mean, rstd, act);
        }
    }
}

// Groups too large for registers: mean, centred variance and output each stream the group.
template <typename T, int VEC>
__device__ __forceinline__ void streaming(const T* __restrict__ x, const T* __restrict__ gamma,
                                          const T* __restrict__ beta, T* __restrict__ y,
                                          const Group& grp, int spatial, float eps, int act) {
    __shared__ float red_a[32];
    __shared__ float red_b[32];
    const int nvec = grp.size / VEC;
    const T* xg = x + grp.base;

    float acc[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc[k] = 0.f;
#pragma unroll 4
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
        float v[VEC];
        load_vec<T, VEC>(v, xg + i * VEC);
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc[k] += v[k];
    }
    float total = 0.f;
#pragma unroll
    for (int k = 0; k < VEC; ++k) total += acc[k];
    const float inv_n = 1.f / (float)grp.size;
    const float mean = block_sum(total, red_a) * inv_n;

#pragma unroll
    for (int k = 0; k < VEC; ++k) acc[k] = 0.f;
#pragma unroll 4
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
        float v[VEC];
        load_vec<T, VEC>(v, xg + i * VEC);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const float d = v[k] - mean;
            acc[k] += d * d;
        }
    }
    total = 0.f;
#pragma unroll
    for (int k = 0; k < VEC; ++k) total += acc[k];
    const float rstd = rsqrtf(block_sum(total, red_b) * inv_n + eps);

#pragma unroll 2
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
        float v[VEC];
        load_vec<T, VEC>(v, xg + i * VEC);
        write_out<T, VEC>(y, gamma, beta, grp, spatial, i * VEC, v, mean, rstd, act);
    }
}

template <typename T, int VEC, int MAXIT>
__device__ __forceinline__ void forward(const T* __restrict__ x, const T* __restrict__ gamma,
                                        const T* __restrict__ beta, T* __restrict__ y,
                                        int groups, int channels_per_group, int spatial,
                                        float eps, int act) {
    const Group grp = this_group(groups, channels_per_group, spatial);
    if constexpr (MAXIT > 0) {
        cached<T, VEC, MAXIT>(x, gamma, beta, y, grp, spatial, eps, act);
    } else {
        streaming<T, VEC>(x, gamma, beta, y, grp, spatial, eps, act);
    }
}

}  // namespace gn

#define GN_ENTRY(NAME, TYPE, VEC, MAXIT)                                                       \
    extern "C" __global__ void __launch_bounds__(1024)                                        \
        NAME(const TYPE* __restrict__ x, const TYPE* __restrict__ gamma,                      \
             const TYPE* __restrict__ beta, TYPE* __restrict__ y, int groups,                 \
             int channels_per_group, int spatial, float eps, int silu) {                      \
        gn::forward<TYPE, VEC, MAXIT>(x, gamma, beta, y, groups, channels_per_group, spatial, \
                                      eps, silu);                                             \
    }

// Entry names: gn_<dtype>_v<VEC> (the group in registers, MAXIT vectors per thread) and
// gn_<dtype>_v<VEC>_stream (MAXIT 0: streamed); listed in group_norm.json.
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gn_f32_v4)
GN_ENTRY(gn_f32_v4, float, 4, 8)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gn_f32_v1)
GN_ENTRY(gn_f32_v1, float, 1, 8)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gn_f16_v8)
GN_ENTRY(gn_f16_v8, __half, 8, 4)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gn_f16_v1)
GN_ENTRY(gn_f16_v1, __half, 1, 8)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gn_bf16_v8)
GN_ENTRY(gn_bf16_v8, __nv_bfloat16, 8, 4)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gn_bf16_v1)
GN_ENTRY(gn_bf16_v1, __nv_bfloat16, 1, 8)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gn_f32_v4_stream)
GN_ENTRY(gn_f32_v4_stream, float, 4, 0)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gn_f32_v1_stream)
GN_ENTRY(gn_f32_v1_stream, float, 1, 0)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gn_f16_v8_stream)
GN_ENTRY(gn_f16_v8_stream, __half, 8, 0)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gn_f16_v1_stream)
GN_ENTRY(gn_f16_v1_stream, __half, 1, 0)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gn_bf16_v8_stream)
GN_ENTRY(gn_bf16_v8_stream, __nv_bfloat16, 8, 0)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gn_bf16_v1_stream)
GN_ENTRY(gn_bf16_v1_stream, __nv_bfloat16, 1, 0)
#endif
