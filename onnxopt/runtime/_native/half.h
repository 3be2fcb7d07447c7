/*
 * float16 / bfloat16 <-> float32 on the host, bit exact: round to nearest even, NaN kept NaN,
 * subnormals and infinities as IEEE 754 says (what __float2half_rn / __float2bfloat16_rn do on
 * the device, and what NumPy and ml_dtypes do in the tests).
 */
#pragma once
#include <stdint.h>
#include <string.h>

static inline float onnxopt_bits_to_float(uint32_t bits) {
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint32_t onnxopt_float_to_bits(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    return bits;
}

static inline float onnxopt_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    if (exp == 0x1F) return onnxopt_bits_to_float(sign | 0x7F800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0) return onnxopt_bits_to_float(sign);
        /* subnormal: mant * 2^-24 */
        float f = (float)mant * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    return onnxopt_bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

static inline uint16_t onnxopt_float_to_half(float f) {
    uint32_t x = onnxopt_float_to_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7FFFFFFFu;
    if (ax >= 0x7F800000u) /* inf or NaN */
        return (uint16_t)(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u : 0u));
    if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) { /* below 2^-14: a subnormal half (or 0) */
        /* its mantissa is value * 2^24 rounded to nearest even: (1.m * 2^23) >> (126 - e) */
        int shift = 126 - (int)(ax >> 23);
        if (shift > 24) return sign; /* below 2^-25: rounds to 0 */
        uint32_t mant = (ax & 0x7FFFFFu) | 0x800000u;
        uint32_t q = mant >> shift, rest = mant & ((1u << shift) - 1u);
        uint32_t halfway = 1u << (shift - 1);
        if (rest > halfway || (rest == halfway && (q & 1u))) q++;
        return (uint16_t)(sign | q); /* q == 0x400 is the smallest normal: still right */
    }
    uint32_t rounded = ax + 0xFFFu + ((ax >> 13) & 1u); /* round to nearest even at bit 13 */
    return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}

static inline float onnxopt_bf16_to_float(uint16_t b) {
    return onnxopt_bits_to_float((uint32_t)b << 16);
}

static inline uint16_t onnxopt_float_to_bf16(float f) {
    uint32_t x = onnxopt_float_to_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

/* Element i of a tensor of ORT element type `dtype` (float32, float16, bfloat16), as float. */
static inline float onnxopt_load(const void *p, int dtype, int64_t i) {
    if (dtype == 1) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dtype == 10 ? onnxopt_half_to_float(h) : onnxopt_bf16_to_float(h);
}

static inline void onnxopt_store(void *p, int dtype, int64_t i, float v) {
    if (dtype == 1) {
        ((float *)p)[i] = v;
    } else {
        ((uint16_t *)p)[i] = dtype == 10 ? onnxopt_float_to_half(v) : onnxopt_float_to_bf16(v);
    }
}

/* v rounded to `dtype` and back: what storing it in a tensor of that type keeps. */
static inline float onnxopt_round(float v, int dtype) {
    if (dtype == 1) return v;
    return dtype == 10 ? onnxopt_half_to_float(onnxopt_float_to_half(v))
                       : onnxopt_bf16_to_float(onnxopt_float_to_bf16(v));
}
