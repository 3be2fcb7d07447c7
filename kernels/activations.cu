// Bias + GELU and the SwiGLU gate, elementwise over [rows, N] tensors.
//
// Semantics (NumPy definition: onnxopt/reference/activations.py::bias_gelu / swiglu):
//   bias_gelu:  t = x + bias (bias [N] broadcast over rows, may be null)
//               approximate == 0: y = 0.5 t (1 + erf(t / sqrt(2)))
//               approximate == 1: y = 0.5 t (1 + tanh(sqrt(2 / pi) (t + 0.044715 t^3)))
//   swiglu:     y[r, c] = silu(gate[r * in_stride + c]) * up[r * in_stride + c],  c < N
//               silu(g) = g / (1 + exp(-g)). Two tensors: in_stride = N. One tensor [rows, 2N]
//               split in halves along the last dim: gate = x, up = x + N, in_stride = 2N
//               (first half is the gate).
//   All arithmetic in fp32 (erff / tanhf / expf, not the approximate intrinsics).
//
// Grid-stride loops over VEC-element vectors. VEC > 1 needs N % VEC == 0 and 16-byte aligned
// pointers (the wrappers fall back to VEC = 1 otherwise). Launch: any grid, block % 32 == 0,
// no dynamic shared memory, no host synchronisation or allocation.

#include "common.cuh"

namespace act {

using onnxopt::load_vec;
using onnxopt::store_vec;

__device__ __forceinline__ float gelu(float t, int approximate) {
    if (approximate) {
        const float k0 = 0.7978845608028654f;  // sqrt(2 / pi)
        return 0.5f * t * (1.f + tanhf(k0 * (t + 0.044715f * t * t * t)));
    }
    return 0.5f * t * (1.f + erff(t * 0.7071067811865476f));
}

__device__ __forceinline__ float silu(float g) {
    // expf(-g) overflows to inf for g < -88: g / inf = -0, the right limit.
    return g / (1.f + expf(-g));
}

template <typename T, int VEC>
__device__ __forceinline__ void bias_gelu(const T* __restrict__ x, const T* __restrict__ bias,
                                          T* __restrict__ y, long long rows, int N,
                                          int approximate) {
    const long long nvec = rows * (long long)(N / VEC);
    const int row_vecs = N / VEC;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < nvec;
         i += (long long)gridDim.x * blockDim.x) {
        float v[VEC];
        load_vec<T, VEC>(v, x + i * VEC);
        if (bias != nullptr) {
            float bv[VEC];
            load_vec<T, VEC>(bv, bias + (int)(i % row_vecs) * VEC);
#pragma unroll
            for (int e = 0; e < VEC; ++e) v[e] += bv[e];
        }
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[e] = gelu(v[e], approximate);
        store_vec<T, VEC>(y + i * VEC, v);
    }
}

template <typename T, int VEC>
__device__ __forceinline__ void swiglu(const T* __restrict__ gate, const T* __restrict__ up,
                                       T* __restrict__ y, long long rows, int N,
                                       long long in_stride) {
    const int row_vecs = N / VEC;
    const long long nvec = rows * (long long)row_vecs;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < nvec;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / row_vecs;
        const int col = (int)(i % row_vecs) * VEC;
        float g[VEC], u[VEC];
        load_vec<T, VEC>(g, gate + r * in_stride + col);
        load_vec<T, VEC>(u, up + r * in_stride + col);
#pragma unroll
        for (int e = 0; e < VEC; ++e) g[e] = silu(g[e]) * u[e];
        store_vec<T, VEC>(y + i * VEC, g);
    }
}

}  // namespace act

#define GELU_ENTRY(NAME, TYPE, VEC)                                                            \
    extern "C" __global__ void __launch_bounds__(256)                                         \
        NAME(const TYPE* __restrict__ x, const TYPE* __restrict__ bias, TYPE* __restrict__ y, \
             long long rows, int N, int approximate) {                                        \
        act::bias_gelu<TYPE, VEC>(x, bias, y, rows, N, approximate);                          \
    }
#define SWIGLU_ENTRY(NAME, TYPE, VEC)                                                          \
    extern "C" __global__ void __launch_bounds__(256)                                         \
        NAME(const TYPE* __restrict__ gate, const TYPE* __restrict__ up, TYPE* __restrict__ y,\
             long long rows, int N, long long in_stride) {                                    \
        act::swiglu<TYPE, VEC>(gate, up, y, rows, N, in_stride);                              \
    }

// Entry names: gelu_<dtype>_v<VEC>, swiglu_<dtype>_v<VEC>.
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gelu_f32_v4)
GELU_ENTRY(gelu_f32_v4, float, 4)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gelu_f32_v1)
GELU_ENTRY(gelu_f32_v1, float, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gelu_f16_v8)
GELU_ENTRY(gelu_f16_v8, __half, 8)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gelu_f16_v1)
GELU_ENTRY(gelu_f16_v1, __half, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gelu_bf16_v8)
GELU_ENTRY(gelu_bf16_v8, __nv_bfloat16, 8)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_gelu_bf16_v1)
GELU_ENTRY(gelu_bf16_v1, __nv_bfloat16, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_swiglu_f32_v4)
SWIGLU_ENTRY(swiglu_f32_v4, float, 4)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_swiglu_f32_v1)
SWIGLU_ENTRY(swiglu_f32_v1, float, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_swiglu_f16_v8)
SWIGLU_ENTRY(swiglu_f16_v8, __half, 8)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_swiglu_f16_v1)
SWIGLU_ENTRY(swiglu_f16_v1, __half, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_swiglu_bf16_v8)
SWIGLU_ENTRY(swiglu_bf16_v8, __nv_bfloat16, 8)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_swiglu_bf16_v1)
SWIGLU_ENTRY(swiglu_bf16_v1, __nv_bfloat16, 1)
#endif
