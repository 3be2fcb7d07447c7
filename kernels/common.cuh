// Shared helpers for the elementwise / row-wise kernels (layer_norm.cu, activations.cu):
// 16-byte vector loads and stores of fp32 / fp16 / bf16 converted to and from float registers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace onnxopt {

template <typename T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// Round a float through T and back (what storing to and reloading from a T tensor does).
template <typename T>
__device__ __forceinline__ float round_to(float v) {
    return to_f32<T>(from_f32<T>(v));
}

// VEC consecutive elements of T, loaded or stored as one access of VEC * sizeof(T) bytes.
// The caller guarantees alignment (the Python wrappers pick VEC = 1 when pointers or the row
// length do not allow a 16-byte access).
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
    T v[VEC];
};

template <typename T, int VEC>
__device__ __forceinline__ void load_vec(float (&out)[VEC], const T* __restrict__ p) {
    const Pack<T, VEC> pk = *reinterpret_cast<const Pack<T, VEC>*>(p);
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = to_f32<T>(pk.v[i]);
}

template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T* __restrict__ p, const float (&in)[VEC]) {
    Pack<T, VEC> pk;
#pragma unroll
    for (int i = 0; i < VEC; ++i) pk.v[i] = from_f32<T>(in[i]);
    *reinterpret_cast<Pack<T, VEC>*>(p) = pk;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int w = 16; w > 0; w >>= 1) v += __shfl_xor_sync(0xffffffffu, v, w);
    return v;
}

// Sum over the block; every thread gets the result. blockDim.x must be a multiple of 32.
// `red` is 32 floats of shared memory used only by this call (one barrier inside).
__device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    // Every warp reduces the partials itself: no second barrier to broadcast a result.
    return warp_sum(lane < nwarps ? red[lane] : 0.f);
}

}  // namespace onnxopt
