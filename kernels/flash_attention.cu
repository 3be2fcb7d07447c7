// FlashAttention-2 style forward pass: O = softmax(Q K^T * scale + bias + mask) V.
//
// Semantics (the NumPy definition is onnxopt/reference/attention.py::attention):
//   Q [B, H, Sq, D], K/V [B, Hkv, Skv, D], O [B, H, Sq, D]; BNSH layout, contiguous.
//   Grouped-query attention: H % Hkv == 0 and query head h reads kv head h / (H / Hkv).
//   D is a runtime value, a multiple of 8 up to the specialisation's DMAX (head dims are padded
//   with zeros to DMAX in shared memory, so one specialisation serves a bucket of head sizes).
//   Key range per batch row: keys j < kv_start[b] or j >= kv_end[b] are masked (left and right
//   padding); either pointer may be null (0 / Skv); both are clamped to [0, Skv].
//   Causal: query i sees key j iff j <= i + off[b], off = causal_off[b] when that pointer is
//   given (key/value caches whose diagonal is not bottom-right), else Skv - Sq (bottom-right).
//   Band (window > 0): query i also sees only keys j >= i + off - window, and when not causal
//   only keys j <= i + off + window (sliding-window and local attention); key tiles wholly
//   outside the band of a block's rows are never loaded, so the work per query row is bounded
//   by the window, not by Skv.
//   bias: an additive float bias of dtype T broadcast to [B, H, Sq, Skv] through element strides
//   (0 on broadcast axes), or null: relative-position / ALiBi biases, any additive mask. A bias
//   of -inf masks its key; finite values below -1e30 are clamped to -1e30 (so that the log2
//   scaling cannot overflow them to -inf: a row masked only by huge finite values stays uniform,
//   as in float arithmetic).
//   A row with no visible key (or only -inf logits) produces exactly 0 (not NaN).
//   Softmax is computed online in fp32 (exp2 with log2(e) folded into the scale).
//
// Two kernel kinds:
//   fa_tc_*   fp16/bf16 inputs, tensor cores (mma.sync m16n8k16, fp32 accumulation), sm_80+.
//             BM = 16 * NWARPS query rows per block (each warp owns 16 rows), BN keys per tile,
//             K/V tiles double-buffered with cp.async (one __syncthreads per tile). Up to
//             DMAX 128 a warp keeps its Q fragments in registers; above, it reloads them from
//             shared memory per key tile (registers go to the larger O accumulator instead).
//   fa_simt_* fp32 inputs, plain CUDA-core tiling (correct, not fast).
//
// Every output element is computed by one thread with a fixed reduction order, so results are
// bitwise reproducible run to run (deterministic).
//
// Launch (both kinds): grid = (ceil(Sq / BM), H, B), block = (32 * NWARPS), dynamic shared
// memory = the formula in flash_attention.json (also fa::TcCfg::SMEM_BYTES below). No host
// synchronisation, no allocation: safe under CUDA-graph capture once the module is loaded.
//
// Specialisations: define ONNXOPT_SPEC_<entry> (or ONNXOPT_SPEC_ALL) to instantiate an entry
// point; see the list at the bottom of this file.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace fa {

constexpr float LOG2E = 1.4426950408889634f;

// ---------------------------------------------------------------------------------------------
// PTX helpers
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global -> shared. src_bytes < 16 zero-fills the rest (0 = all zeros; the
// source address is then not read but we still pass a valid one).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
// 2^x on the SFU, flushing denormal results to 0; ex2.approx.ftz(-inf) = +0.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// ldmatrix .x4: lanes 8i..8i+7 supply the row addresses (16 bytes each) of 8x8 matrix i; r[i]
// receives matrix i. Without .trans lane t gets (row t/4, cols 2(t%4), 2(t%4)+1); with .trans
// it gets (rows 2(t%4), 2(t%4)+1, col t/4), i.e. the transposed matrix's fragment.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

// mma.sync.aligned.m16n8k16.row.col, fp32 accumulate. Fragment layouts (PTX ISA, "Matrix
// fragments for mma.m16n8k16 with floating point type"); g = lane / 4, c = lane % 4:
//   A (16x16, row-major), 4 x .b32 each holding 2 consecutive-column elements (low half = lower
//     column):  a0 = (g,   2c..2c+1)   a1 = (g+8, 2c..2c+1)
//               a2 = (g,   2c+8..+9)   a3 = (g+8, 2c+8..+9)
//   B (16x8, K x N, "col"): b0 = (k = 2c..2c+1, n = g)   b1 = (k = 2c+8..2c+9, n = g)
//   C/D (16x8 fp32): d0,d1 = (g, 2c..2c+1)   d2,d3 = (g+8, 2c..2c+1)
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1);

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                         uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Pack two floats into one .b32 of T (round to nearest even); lo goes to the low 16 bits.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// ---------------------------------------------------------------------------------------------
// Tensor-core kernel
// ---------------------------------------------------------------------------------------------

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

// Everything a block needs to know about masking, resolved once per (b, h).
struct Mask {
    int start, end;  // visible key range [start, end) of this batch row
    int off;         // causal: key j visible to query i iff j <= i + off
    int causal;
    int window;      // > 0: a band, |i + off - j| <= window (and j <= i + off when causal)

    // Key j is hidden from query i (beyond the key range, the diagonal or the band).
    __device__ __forceinline__ bool hidden(int key, int qi) const {
        const int pos = qi + off;
        return key >= end || (causal && key > pos) ||
               (window > 0 && (key < pos - window || (!causal && key > pos + window)));
    }
    // The keys some row of [q0, q0 + rows) may see: [*first, *last) within [start, end).
    __device__ __forceinline__ void block_keys(int q0, int rows, int* first, int* last) const {
        int lo = start, hi = end;
        if (causal) hi = min(hi, q0 + rows - 1 + off + 1);
        if (window > 0) {
            lo = max(lo, q0 + off - window);
            if (!causal) hi = min(hi, q0 + rows - 1 + off + window + 1);
        }
        *first = lo;
        *last = hi;
    }
    // Whether key tile [n0, n0 + n) holds a key hidden from some row of [q0, q0 + rows).
    __device__ __forceinline__ bool tile_needs_mask(int n0, int n, int q0, int rows) const {
        return n0 + n > end || (causal && n0 + n - 1 > q0 + off) ||
               (window > 0 && (n0 < q0 + rows - 1 + off - window ||
                               (!causal && n0 + n - 1 > q0 + off + window)));
    }
};

__device__ __forceinline__ Mask resolve_mask(const int* kv_start, const int* kv_end,
                                             const int* causal_off, int b, int Sq, int Skv,
                                             int causal, int window) {
    Mask m;
    m.start = kv_start != nullptr ? min(max(kv_start[b], 0), Skv) : 0;
    m.end = kv_end != nullptr ? min(max(kv_end[b], m.start), Skv) : Skv;
    m.off = causal_off != nullptr ? causal_off[b] : Skv - Sq;
    m.causal = causal;
    m.window = window > 0 ? window : 0;
    return m;
}

// The bias in the log2 domain: -inf stays -inf, finite values are clamped at -1e30 first.
template <typename T>
__device__ __forceinline__ float bias_log2(const T* p) {
    const float b = to_f32<T>(*p);
    return b == -INFINITY ? -INFINITY : fmaxf(b, -1e30f) * LOG2E;
}

// Strides (elements) of the broadcast bias; key stride 0 or 1.
struct BiasStrides {
    long long b, h, q, k;
};

// ---------------------------------------------------------------------------------------------
// Tensor-core kernel
// ---------------------------------------------------------------------------------------------

// Shared memory: [Q: BM rows][K stage 0][V stage 0][K stage 1][V stage 1], each row DMAX + PAD
// elements. The 16-byte pad shifts consecutive rows by 4 banks, so the 8 row addresses of
// every ldmatrix phase (same column, 8 consecutive rows) hit 8 distinct 16-byte bank groups:
// conflict-free without a swizzle. Keep in sync with "smem_bytes" in flash_attention.json.
template <typename T, int DMAX, int NWARPS, int BN>
struct TcCfg {
    static constexpr int PAD = 8;
    static constexpr int LDS = DMAX + PAD;  // smem row stride, elements
    static constexpr int BM = 16 * NWARPS;
    static constexpr int NTHREADS = 32 * NWARPS;
    static constexpr int Q_ELEMS = BM * LDS;
    static constexpr int KV_ELEMS = BN * LDS;
    static constexpr int SMEM_BYTES = (Q_ELEMS + 4 * KV_ELEMS) * int(sizeof(T));
    static constexpr bool Q_IN_REGS = DMAX <= 128;
    static_assert(DMAX % 16 == 0 && BN % 16 == 0, "DMAX and BN must be multiples of 16");
    static_assert(SMEM_BYTES <= 227 * 1024, "tile does not fit in shared memory");
};

// Copy ROWS x DMAX elements (global row stride D, the first D columns real) into shared memory
// (row stride LDS) with 16-byte cp.async; rows >= valid_rows and columns >= D are zero-filled
// (valid_rows >= 1, so row 0 is a safe address). D % 8 == 0.
template <int ROWS, int DMAX, int LDS, int NTHREADS, typename T>
__device__ __forceinline__ void load_tile_async(T* smem, const T* gmem, int valid_rows, int D,
                                                int tid) {
    constexpr int CHUNKS = DMAX / 8;  // 16-byte chunks per row
    constexpr int TOTAL = ROWS * CHUNKS;
#pragma unroll
    for (int it = 0; it < (TOTAL + NTHREADS - 1) / NTHREADS; ++it) {
        const int c = tid + it * NTHREADS;
        if (TOTAL % NTHREADS == 0 || c < TOTAL) {
            const int r = c / CHUNKS;
            const int cc = c % CHUNKS;
            const bool ok = r < valid_rows && cc * 8 < D;
            const T* src = gmem + (ok ? (size_t)r * D + cc * 8 : 0);
            cp_async_16(smem_u32(smem + r * LDS + cc * 8), src, ok ? 16 : 0);
        }
    }
}

template <typename T, int DMAX, int NWARPS, int BN>
__device__ __forceinline__ void tc_forward(const T* __restrict__ Q, const T* __restrict__ K,
                                           const T* __restrict__ V, T* __restrict__ O,
                                           const T* __restrict__ bias, BiasStrides bs,
                                           const int* __restrict__ kv_start,
                                           const int* __restrict__ kv_end,
                                           const int* __restrict__ causal_off, int H, int Hkv,
                                           int Sq, int Skv, int D, float scale, int causal,
                                           int window) {
    using Cfg = TcCfg<T, DMAX, NWARPS, BN>;
    constexpr int BM = Cfg::BM;
    constexpr int LDS = Cfg::LDS;
    constexpr int NT = Cfg::NTHREADS;
    constexpr int KD = DMAX / 16;  // k16 steps over the head dim (S = Q K^T)
    constexpr int KN = BN / 16;    // k16 steps over the keys of a tile (O += P V)
    constexpr int QF = Cfg::Q_IN_REGS ? KD : 1;

    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* const sQ = reinterpret_cast<T*>(smem_raw);
    T* const sKV = sQ + Cfg::Q_ELEMS;  // stage s: K at sKV + 2s*KV_ELEMS, V right after

    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;  // mma group id: fragment rows g and g + 8
    const int c = lane & 3;   // thread in group: fragment columns 2c, 2c + 1

    // Heaviest (causal) query tiles first: fewer stragglers in the last wave.
    const int q_tile = gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y;
    const int b = blockIdx.z;
    const int hk = h / (H / Hkv);
    const int q0 = q_tile * BM;
    const int q_rows = min(BM, Sq - q0);

    const T* Qb = Q + ((size_t)(b * H + h) * Sq + q0) * D;
    const T* Kb = K + (size_t)(b * Hkv + hk) * Skv * D;
    const T* Vb = V + (size_t)(b * Hkv + hk) * Skv * D;
    T* Ob = O + ((size_t)(b * H + h) * Sq + q0) * D;
    const T* Bb = bias != nullptr ? bias + b * bs.b + h * bs.h : nullptr;

    const Mask mk = resolve_mask(kv_start, kv_end, causal_off, b, Sq, Skv, causal, window);
    // Keys [n_begin, n_end) can be visible to some row of this block; tiles start at n_begin.
    int n_begin, n_end;
    mk.block_keys(q0, q_rows, &n_begin, &n_end);
    const int n_tiles = n_end > n_begin ? (n_end - n_begin + BN - 1) / BN : 0;

    if (n_tiles == 0) {  // every row fully masked: defined as 0
        const uint4 zero = make_uint4(0, 0, 0, 0);
        for (int i = tid; i < q_rows * (D / 8); i += NT)
            *reinterpret_cast<uint4*>(Ob + (size_t)(i / (D / 8)) * D + (i % (D / 8)) * 8) = zero;
        return;
    }

    // Prologue: Q and the first K/V tile in one group.
    const int first_valid = min(BN, mk.end - n_begin);
    load_tile_async<BM, DMAX, LDS, NT>(sQ, Qb, q_rows, D, tid);
    load_tile_async<BN, DMAX, LDS, NT>(sKV, Kb + (size_t)n_begin * D, first_valid, D, tid);
    load_tile_async<BN, DMAX, LDS, NT>(sKV + Cfg::KV_ELEMS, Vb + (size_t)n_begin * D,
                                       first_valid, D, tid);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();

    // Q fragments (registers for the whole key loop when they fit). Warp w owns rows
    // 16w..16w+15. ldmatrix.x4 lane l -> row (l & 15), column block (l >> 4) * 8 gives matrices
    // (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15) = a0..a3.
    const uint32_t q_addr = smem_u32(sQ + (warp * 16 + (lane & 15)) * LDS + (lane >> 4) * 8);
    uint32_t qf[QF][4];
    if (Cfg::Q_IN_REGS) {
#pragma unroll
        for (int kk = 0; kk < QF; ++kk) ldmatrix_x4(qf[kk], q_addr + kk * 16 * sizeof(T));
    }

    float o[DMAX / 8][4];
#pragma unroll
    for (int j = 0; j < DMAX / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m_run[2] = {-INFINITY, -INFINITY};  // running max (log2 domain) of rows g, g + 8
    float l_run[2] = {0.f, 0.f};              // this thread's partial row sums (quad-reduced at end)
    const float scale_log2 = scale * LOG2E;
    const int row0 = q0 + warp * 16 + g;  // query index of accumulator elements 0,1 (row0 + 8: 2,3)

    for (int t = 0; t < n_tiles; ++t) {
        const int n0 = n_begin + t * BN;
        if (t > 0) {
            cp_async_wait_all();  // this thread's copies of tile t have landed ...
            __syncthreads();      // ... everyone's too; and all warps finished tile t - 1
        }
        // Prefetch tile t + 1 into the other stage (last read during tile t - 1, see barrier).
        if (t + 1 < n_tiles) {
            T* sKn = sKV + ((t + 1) & 1) * 2 * Cfg::KV_ELEMS;
            const int n1 = n0 + BN;
            const int valid = min(BN, mk.end - n1);  // >= 1 since n1 < n_end <= end
            load_tile_async<BN, DMAX, LDS, NT>(sKn, Kb + (size_t)n1 * D, valid, D, tid);
            load_tile_async<BN, DMAX, LDS, NT>(sKn + Cfg::KV_ELEMS, Vb + (size_t)n1 * D, valid,
                                               D, tid);
            cp_async_commit();
        }
        const T* sK = sKV + (t & 1) * 2 * Cfg::KV_ELEMS;
        const T* sV = sK + Cfg::KV_ELEMS;

        // S = Q K^T for this warp's 16 rows x BN keys. B[k][n] = K[n][k] is K read row-major,
        // i.e. B "col" layout with no transpose: matrix (keys n..n+7, dims k..k+7) gives lane l
        // (key n + l/4, dims k + 2(l%4), +1) = b0. ldmatrix.x4 lane l -> key (l & 7) + (l >> 4) * 8,
        // dim block ((l >> 3) & 1) * 8: r0,r1 = b0,b1 of key tile 2p; r2,r3 = b0,b1 of 2p + 1.
        float s[BN / 8][4];
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            uint32_t qs[4];
            if (!Cfg::Q_IN_REGS) ldmatrix_x4(qs, q_addr + kk * 16 * sizeof(T));
            const uint32_t(&qa)[4] = Cfg::Q_IN_REGS ? qf[Cfg::Q_IN_REGS ? kk : 0] : qs;
#pragma unroll
            for (int p = 0; p < BN / 16; ++p) {
                uint32_t kb[4];
                ldmatrix_x4(kb, smem_u32(sK + (p * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDS +
                                         kk * 16 + ((lane >> 3) & 1) * 8));
                mma_16816<T>(s[2 * p], qa, kb[0], kb[1]);
                mma_16816<T>(s[2 * p + 1], qa, kb[2], kb[3]);
            }
        }

        // Scale into the log2 domain, add the bias; mask only tiles that can hold a masked key.
        const bool need_mask = mk.tile_needs_mask(n0, BN, q0, q_rows);
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float v = s[j][e] * scale_log2;
                const int key = n0 + j * 8 + 2 * c + (e & 1);
                const int qi = row0 + (e >> 1) * 8;
                if (need_mask && mk.hidden(key, qi)) {
                    v = -INFINITY;
                } else if (Bb != nullptr && qi < Sq) {
                    v += bias_log2(Bb + qi * bs.q + key * bs.k);
                }
                s[j][e] = v;
            }
        }

        // Online softmax. A row's BN values live in the 4 threads of a quad (same g).
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            mx[0] = fmaxf(mx[0], fmaxf(s[j][0], s[j][1]));
            mx[1] = fmaxf(mx[1], fmaxf(s[j][2], s[j][3]));
        }
        float alpha[2], m_use[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float m_new = fmaxf(m_run[r], mx[r]);
            // A row with no visible key so far keeps m = -inf; subtract 0 instead so that
            // exp2(-inf - m) is 0, never NaN. alpha = 0 when the old max was -inf.
            m_use[r] = (m_new == -INFINITY) ? 0.f : m_new;
            alpha[r] = fast_exp2(m_run[r] - m_use[r]);
            m_run[r] = m_new;
        }
        float rs[2] = {0.f, 0.f};
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            s[j][0] = fast_exp2(s[j][0] - m_use[0]);
            s[j][1] = fast_exp2(s[j][1] - m_use[0]);
            s[j][2] = fast_exp2(s[j][2] - m_use[1]);
            s[j][3] = fast_exp2(s[j][3] - m_use[1]);
            rs[0] += s[j][0] + s[j][1];
            rs[1] += s[j][2] + s[j][3];
        }
        l_run[0] = l_run[0] * alpha[0] + rs[0];
        l_run[1] = l_run[1] * alpha[1] + rs[1];
#pragma unroll
        for (int j = 0; j < DMAX / 8; ++j) {
            o[j][0] *= alpha[0];
            o[j][1] *= alpha[0];
            o[j][2] *= alpha[1];
            o[j][3] *= alpha[1];
        }

        // O += P V. P's A fragment for key step kk is the S accumulators of key tiles 2kk and
        // 2kk + 1 (C layout (g, 2c..) / (g+8, 2c..) equals A's a0/a1 and a2/a3 halves).
        // B[k][n] = V[k][n] is row-major in smem, so use ldmatrix.trans: matrix (keys k..k+7,
        // dims n..n+7) transposed gives lane l (keys k + 2(l%4), +1; dim n + l/4) = b0.
        // ldmatrix.x4.trans lane l -> key (l & 15), dim block (l >> 4) * 8: r0,r1 = b0,b1 of dim
        // tile 2p; r2,r3 = b0,b1 of dim tile 2p + 1.
#pragma unroll
        for (int kk = 0; kk < KN; ++kk) {
            uint32_t pa[4];
            pa[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
            pa[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
            pa[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int p = 0; p < DMAX / 16; ++p) {
                uint32_t vb[4];
                ldmatrix_x4_trans(vb, smem_u32(sV + (kk * 16 + (lane & 15)) * LDS + p * 16 +
                                               (lane >> 4) * 8));
                mma_16816<T>(o[2 * p], pa, vb[0], vb[1]);
                mma_16816<T>(o[2 * p + 1], pa, vb[2], vb[3]);
            }
        }
    }

    // Epilogue: full row sums, normalise, stage this warp's 16 rows in its own (no longer
    // needed) Q rows, then write 16-byte vectors of the D real columns. Only this warp touches
    // these smem rows.
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = l_run[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        inv[r] = l > 0.f ? 1.f / l : 0.f;  // fully masked row -> 0
    }
    __syncwarp();  // every lane's last reads of its Q rows (reloaded fragments) are done
    T* sO = sQ + warp * 16 * LDS;
#pragma unroll
    for (int j = 0; j < DMAX / 8; ++j) {
        const int col = j * 8 + 2 * c;
        *reinterpret_cast<uint32_t*>(sO + g * LDS + col) = pack2<T>(o[j][0] * inv[0], o[j][1] * inv[0]);
        *reinterpret_cast<uint32_t*>(sO + (g + 8) * LDS + col) =
            pack2<T>(o[j][2] * inv[1], o[j][3] * inv[1]);
    }
    __syncwarp();
    const int chunks = D / 8;
#pragma unroll
    for (int it = 0; it < 16 * (DMAX / 8) / 32; ++it) {
        const int i = lane + it * 32;
        const int r = i / (DMAX / 8);
        const int cc = i % (DMAX / 8);
        if (cc < chunks && warp * 16 + r < q_rows)
            *reinterpret_cast<uint4*>(Ob + (size_t)(warp * 16 + r) * D + cc * 8) =
                *reinterpret_cast<const uint4*>(sO + r * LDS + cc * 8);
    }
}

// ---------------------------------------------------------------------------------------------
// fp32 CUDA-core kernel: NWARPS warps x RPW rows each; BN = 32 keys per tile (one per lane).
// ---------------------------------------------------------------------------------------------

template <int DMAX, int NWARPS, int RPW>
struct SimtCfg {
    static constexpr int BM = NWARPS * RPW;
    static constexpr int BN = 32;
    static constexpr int NTHREADS = 32 * NWARPS;
    static constexpr int LDK = DMAX + 1;  // odd stride: lane j reading K[j][d] is conflict-free
    static constexpr int SMEM_BYTES = (BM * DMAX + BN * LDK + BN * DMAX) * 4;
    static_assert(DMAX % 32 == 0, "DMAX must be a multiple of 32");
};

template <int DMAX, int NWARPS, int RPW>
__device__ __forceinline__ void simt_forward(const float* __restrict__ Q,
                                             const float* __restrict__ K,
                                             const float* __restrict__ V, float* __restrict__ O,
                                             const float* __restrict__ bias, BiasStrides bs,
                                             const int* __restrict__ kv_start,
                                             const int* __restrict__ kv_end,
                                             const int* __restrict__ causal_off, int H, int Hkv,
                                             int Sq, int Skv, int D, float scale, int causal,
                                             int window) {
    using Cfg = SimtCfg<DMAX, NWARPS, RPW>;
    constexpr int BM = Cfg::BM;
    constexpr int BN = Cfg::BN;
    constexpr int NT = Cfg::NTHREADS;
    constexpr int LDK = Cfg::LDK;
    constexpr int DL = DMAX / 32;  // output columns per lane: lane + 32 * k

    extern __shared__ __align__(16) unsigned char smem_raw[];
    float* sQ = reinterpret_cast<float*>(smem_raw);
    float* sK = sQ + BM * DMAX;
    float* sV = sK + BN * LDK;

    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int q_tile = gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y;
    const int b = blockIdx.z;
    const int hk = h / (H / Hkv);
    const int q0 = q_tile * BM;
    const int q_rows = min(BM, Sq - q0);

    const float* Qb = Q + ((size_t)(b * H + h) * Sq + q0) * D;
    const float* Kb = K + (size_t)(b * Hkv + hk) * Skv * D;
    const float* Vb = V + (size_t)(b * Hkv + hk) * Skv * D;
    float* Ob = O + ((size_t)(b * H + h) * Sq + q0) * D;
    const float* Bb = bias != nullptr ? bias + b * bs.b + h * bs.h : nullptr;

    const Mask mk = resolve_mask(kv_start, kv_end, causal_off, b, Sq, Skv, causal, window);
    int n_begin, n_end;
    mk.block_keys(q0, q_rows, &n_begin, &n_end);
    const int n_tiles = n_end > n_begin ? (n_end - n_begin + BN - 1) / BN : 0;

    for (int i = tid; i < BM * DMAX; i += NT) {
        const int r = i / DMAX, d = i % DMAX;
        sQ[i] = (r < q_rows && d < D) ? Qb[(size_t)r * D + d] : 0.f;
    }

    float o[RPW][DL];
    float m_run[RPW], l_run[RPW];
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
        m_run[r] = -INFINITY;
        l_run[r] = 0.f;
#pragma unroll
        for (int k = 0; k < DL; ++k) o[r][k] = 0.f;
    }
    const float scale_log2 = scale * LOG2E;

    for (int t = 0; t < n_tiles; ++t) {
        const int n0 = n_begin + t * BN;
        __syncthreads();  // previous tile fully consumed (and sQ written, at t == 0)
        for (int i = tid; i < BN * DMAX; i += NT) {
            const int r = i / DMAX, d = i % DMAX;
            // zero-fill: masked V rows must not inject NaN; padded head dims stay 0
            const bool ok = n0 + r < mk.end && d < D;
            sK[r * LDK + d] = ok ? Kb[(size_t)(n0 + r) * D + d] : 0.f;
            sV[i] = ok ? Vb[(size_t)(n0 + r) * D + d] : 0.f;
        }
        __syncthreads();

        float s[RPW];
#pragma unroll
        for (int r = 0; r < RPW; ++r) s[r] = 0.f;
        for (int d = 0; d < DMAX; ++d) {
            const float kd = sK[lane * LDK + d];
#pragma unroll
            for (int r = 0; r < RPW; ++r) s[r] = fmaf(sQ[(warp * RPW + r) * DMAX + d], kd, s[r]);
        }
        const int key = n0 + lane;
#pragma unroll
        for (int r = 0; r < RPW; ++r) {
            const int qi = q0 + warp * RPW + r;
            float v = s[r] * scale_log2;
            if (mk.hidden(key, qi)) {
                v = -INFINITY;
            } else if (Bb != nullptr && qi < Sq) {
                v += bias_log2(Bb + qi * bs.q + key * bs.k);
            }
            float mx = v;
#pragma unroll
            for (int w = 16; w > 0; w >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, w));
            const float m_new = fmaxf(m_run[r], mx);
            const float m_use = (m_new == -INFINITY) ? 0.f : m_new;
            const float alpha = fast_exp2(m_run[r] - m_use);
            m_run[r] = m_new;
            const float p = fast_exp2(v - m_use);
            float ps = p;
#pragma unroll
            for (int w = 16; w > 0; w >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, w);
            l_run[r] = l_run[r] * alpha + ps;
#pragma unroll
            for (int k = 0; k < DL; ++k) o[r][k] *= alpha;
#pragma unroll 8
            for (int j = 0; j < BN; ++j) {
                const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
                for (int k = 0; k < DL; ++k) o[r][k] = fmaf(pj, sV[j * DMAX + lane + 32 * k], o[r][k]);
            }
        }
    }

#pragma unroll
    for (int r = 0; r < RPW; ++r) {
        const int row = warp * RPW + r;
        if (row < q_rows) {
            const float inv = l_run[r] > 0.f ? 1.f / l_run[r] : 0.f;
#pragma unroll
            for (int k = 0; k < DL; ++k)
                if (lane + 32 * k < D) Ob[(size_t)row * D + lane + 32 * k] = o[r][k] * inv;
        }
    }
}

}  // namespace fa

// ---------------------------------------------------------------------------------------------
// Entry points. Names: fa_<kind>_<dtype>_d<DMAX>_bm<BM>_bn<BN>; the table in
// flash_attention.json lists the same set (tests check both directions). The parameter list is
// the "params" of flash_attention.json, in that order (tests check it against FA_PARAMS).
// ---------------------------------------------------------------------------------------------

#define FA_PARAMS(T)                                                                          \
    const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,                \
        T *__restrict__ o, const T *__restrict__ bias, long long bias_sb, long long bias_sh,  \
        long long bias_sq, long long bias_sk, const int *__restrict__ kv_start,               \
        const int *__restrict__ kv_end, const int *__restrict__ causal_off, int H, int Hkv,   \
        int Sq, int Skv, int D, float scale, int causal, int window
#define FA_ARGS                                                                               \
    q, k, v, o, bias, fa::BiasStrides{bias_sb, bias_sh, bias_sq, bias_sk}, kv_start, kv_end,  \
        causal_off, H, Hkv, Sq, Skv, D, scale, causal, window

// MINB: blocks per SM to fit in registers (__launch_bounds__ min blocks): 65536 / (32 * NWARPS *
// MINB) registers per thread at most.
#define FA_TC_ENTRY(NAME, TYPE, DMAX, NWARPS, BN, MINB)                                         \
    extern "C" __global__ void __launch_bounds__(32 * NWARPS, MINB) NAME(FA_PARAMS(TYPE)) {   \
        fa::tc_forward<TYPE, DMAX, NWARPS, BN>(FA_ARGS);                                        \
    }
#define FA_SIMT_ENTRY(NAME, DMAX, NWARPS, RPW)                                                  \
    extern "C" __global__ void __launch_bounds__(32 * NWARPS, 1) NAME(FA_PARAMS(float)) {       \
        fa::simt_forward<DMAX, NWARPS, RPW>(FA_ARGS);                                           \
    }

#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_f16_d32_bm128_bn64)
FA_TC_ENTRY(fa_tc_f16_d32_bm128_bn64, __half, 32, 8, 64, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_f16_d32_bm64_bn64)
FA_TC_ENTRY(fa_tc_f16_d32_bm64_bn64, __half, 32, 4, 64, 3)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_f16_d64_bm128_bn64)
FA_TC_ENTRY(fa_tc_f16_d64_bm128_bn64, __half, 64, 8, 64, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_f16_d64_bm64_bn64)
FA_TC_ENTRY(fa_tc_f16_d64_bm64_bn64, __half, 64, 4, 64, 3)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_f16_d96_bm128_bn64)
FA_TC_ENTRY(fa_tc_f16_d96_bm128_bn64, __half, 96, 8, 64, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_f16_d96_bm64_bn64)
FA_TC_ENTRY(fa_tc_f16_d96_bm64_bn64, __half, 96, 4, 64, 2)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_f16_d128_bm128_bn64)
FA_TC_ENTRY(fa_tc_f16_d128_bm128_bn64, __half, 128, 8, 64, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_f16_d128_bm64_bn64)
FA_TC_ENTRY(fa_tc_f16_d128_bm64_bn64, __half, 128, 4, 64, 2)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_f16_d160_bm128_bn32)
FA_TC_ENTRY(fa_tc_f16_d160_bm128_bn32, __half, 160, 8, 32, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_f16_d160_bm64_bn32)
FA_TC_ENTRY(fa_tc_f16_d160_bm64_bn32, __half, 160, 4, 32, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_f16_d192_bm128_bn32)
FA_TC_ENTRY(fa_tc_f16_d192_bm128_bn32, __half, 192, 8, 32, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_f16_d192_bm64_bn32)
FA_TC_ENTRY(fa_tc_f16_d192_bm64_bn32, __half, 192, 4, 32, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_f16_d224_bm128_bn32)
FA_TC_ENTRY(fa_tc_f16_d224_bm128_bn32, __half, 224, 8, 32, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_f16_d224_bm64_bn32)
FA_TC_ENTRY(fa_tc_f16_d224_bm64_bn32, __half, 224, 4, 32, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_f16_d256_bm128_bn32)
FA_TC_ENTRY(fa_tc_f16_d256_bm128_bn32, __half, 256, 8, 32, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_f16_d256_bm64_bn32)
FA_TC_ENTRY(fa_tc_f16_d256_bm64_bn32, __half, 256, 4, 32, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_bf16_d32_bm128_bn64)
FA_TC_ENTRY(fa_tc_bf16_d32_bm128_bn64, __nv_bfloat16, 32, 8, 64, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_bf16_d32_bm64_bn64)
FA_TC_ENTRY(fa_tc_bf16_d32_bm64_bn64, __nv_bfloat16, 32, 4, 64, 3)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_bf16_d64_bm128_bn64)
FA_TC_ENTRY(fa_tc_bf16_d64_bm128_bn64, __nv_bfloat16, 64, 8, 64, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_bf16_d64_bm64_bn64)
FA_TC_ENTRY(fa_tc_bf16_d64_bm64_bn64, __nv_bfloat16, 64, 4, 64, 3)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_bf16_d96_bm128_bn64)
FA_TC_ENTRY(fa_tc_bf16_d96_bm128_bn64, __nv_bfloat16, 96, 8, 64, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_bf16_d96_bm64_bn64)
FA_TC_ENTRY(fa_tc_bf16_d96_bm64_bn64, __nv_bfloat16, 96, 4, 64, 2)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_bf16_d128_bm128_bn64)
FA_TC_ENTRY(fa_tc_bf16_d128_bm128_bn64, __nv_bfloat16, 128, 8, 64, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_bf16_d128_bm64_bn64)
FA_TC_ENTRY(fa_tc_bf16_d128_bm64_bn64, __nv_bfloat16, 128, 4, 64, 2)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_bf16_d160_bm128_bn32)
FA_TC_ENTRY(fa_tc_bf16_d160_bm128_bn32, __nv_bfloat16, 160, 8, 32, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_bf16_d160_bm64_bn32)
FA_TC_ENTRY(fa_tc_bf16_d160_bm64_bn32, __nv_bfloat16, 160, 4, 32, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_bf16_d192_bm128_bn32)
FA_TC_ENTRY(fa_tc_bf16_d192_bm128_bn32, __nv_bfloat16, 192, 8, 32, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_bf16_d192_bm64_bn32)
FA_TC_ENTRY(fa_tc_bf16_d192_bm64_bn32, __nv_bfloat16, 192, 4, 32, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_bf16_d224_bm128_bn32)
FA_TC_ENTRY(fa_tc_bf16_d224_bm128_bn32, __nv_bfloat16, 224, 8, 32, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_bf16_d224_bm64_bn32)
FA_TC_ENTRY(fa_tc_bf16_d224_bm64_bn32, __nv_bfloat16, 224, 4, 32, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_bf16_d256_bm128_bn32)
FA_TC_ENTRY(fa_tc_bf16_d256_bm128_bn32, __nv_bfloat16, 256, 8, 32, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_tc_bf16_d256_bm64_bn32)
FA_TC_ENTRY(fa_tc_bf16_d256_bm64_bn32, __nv_bfloat16, 256, 4, 32, 1)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_simt_f32_d32_bm16_bn32)
FA_SIMT_ENTRY(fa_simt_f32_d32_bm16_bn32, 32, 4, 4)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_simt_f32_d64_bm16_bn32)
FA_SIMT_ENTRY(fa_simt_f32_d64_bm16_bn32, 64, 4, 4)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_simt_f32_d96_bm16_bn32)
FA_SIMT_ENTRY(fa_simt_f32_d96_bm16_bn32, 96, 4, 4)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_simt_f32_d128_bm16_bn32)
FA_SIMT_ENTRY(fa_simt_f32_d128_bm16_bn32, 128, 4, 4)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_simt_f32_d160_bm16_bn32)
FA_SIMT_ENTRY(fa_simt_f32_d160_bm16_bn32, 160, 4, 4)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_simt_f32_d192_bm16_bn32)
FA_SIMT_ENTRY(fa_simt_f32_d192_bm16_bn32, 192, 4, 4)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_simt_f32_d224_bm16_bn32)
FA_SIMT_ENTRY(fa_simt_f32_d224_bm16_bn32, 224, 4, 4)
#endif
#if defined(ONNXOPT_SPEC_ALL) || defined(ONNXOPT_SPEC_fa_simt_f32_d256_bm16_bn32)
FA_SIMT_ENTRY(fa_simt_f32_d256_bm16_bn32, 256, 4, 4)
#endif
