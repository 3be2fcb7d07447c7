/*
 * The kernels on the host: what ORT's CPU provider runs. Each reads the argument array the
 * GPU launch would get (unpacked by the generated code, so a packing mistake shows here too)
 * and runs the grid block by block, each block doing what the CUDA block does: attention a
 * tile of BM query rows of one head, the norms one row or one (batch, group), the activations
 * their grid-stride loop. A launch that breaks the kernel's own preconditions (a block too
 * small for the row, a vector width the pointers do not allow) is an error here as it would be
 * a wrong answer there.
 *
 * Arithmetic is float32 as on the device (the statistics of the norms are accumulated in
 * double: the device's tree reductions are at least that close to exact), rounded to the
 * tensor's dtype on store. Semantics: the header comments of kernels/<family>.cu and
 * onnxopt/reference/.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "half.h"
#include "ops.h"

static const void *P(uint64_t p) { return (const void *)(uintptr_t)p; }
static void *W(uint64_t p) { return (void *)(uintptr_t)p; }

static int vec_ok(const struct onnxopt_variant *v, int64_t n, uint64_t a, uint64_t b, uint64_t c,
                  uint64_t d, uint64_t e, uint64_t f) {
    if (v->vec == 1) return 1;
    return n % v->vec == 0 && a % 16 == 0 && b % 16 == 0 && c % 16 == 0 && d % 16 == 0 &&
           e % 16 == 0 && f % 16 == 0;
}

/* --- attention: one block = BM query rows of head h of batch row b ---------------------------- */

static const float BIAS_FLOOR = -1e30f;

/* q·k over D floats, in eight running sums (the compiler vectorises them; one running sum is
 * bound by the latency of each add). */
static float dot(const float *q, const float *k, int D) {
    float part[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    int d = 0;
    for (; d + 8 <= D; d += 8)
        for (int u = 0; u < 8; ++u) part[u] += q[d + u] * k[d + u];
    float sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    for (; d < D; ++d) sum += q[d] * k[d];
    return sum;
}

/* Key and value rows of one (batch row, key/value head), converted to float once for every
 * query head and row tile that reads them (not once per query row). */
static void load_rows(const void *src, int dt, int64_t base, int rows, int D, float *dst) {
    for (int64_t e = 0; e < (int64_t)rows * D; ++e) dst[e] = onnxopt_load(src, dt, base * D + e);
}

static int host_attention(const struct onnxopt_variant *v, const unsigned grid[3],
                          void *const *argv, char *err) {
    struct onnxopt_flash_attention_args a;
    onnxopt_flash_attention_unpack(argv, &a);
    const int dt = v->dtype, H = a.H, Hkv = a.Hkv, Sq = a.Sq, Skv = a.Skv, D = a.D;
    if (D > v->dmax) return onnxopt_fail(err, "%s: head size %d above its bucket %d", v->entry, D, v->dmax);
    if ((int64_t)grid[0] * v->bm < Sq || (int)grid[1] != H)
        return onnxopt_fail(err, "%s: grid (%u, %u) does not cover %d query rows of %d heads", v->entry,
                    grid[0], grid[1], Sq, H);
    const int32_t *kv_start = P(a.kv_start), *kv_end = P(a.kv_end), *coff = P(a.causal_off);
    const size_t keys = Skv > 0 ? (size_t)Skv : 1;
    float *scores = malloc(sizeof(float) * keys);
    float *kf = malloc(sizeof(float) * keys * (size_t)D), *vf = malloc(sizeof(float) * keys * (size_t)D);
    float *q = malloc(sizeof(float) * (size_t)D), *acc = malloc(sizeof(float) * (size_t)D);
    if (!scores || !kf || !vf || !q || !acc) {
        free(scores), free(kf), free(vf), free(q), free(acc);
        return onnxopt_fail(err, "out of host memory");
    }
    const int group = H / Hkv;
    int64_t loaded = -1; /* the (batch row, key/value head) whose rows kf and vf hold */
    for (unsigned bz = 0; bz < grid[2]; ++bz)
        for (unsigned by = 0; by < grid[1]; ++by)
            for (unsigned bx = 0; bx < grid[0]; ++bx) {
                const int b = (int)bz, h = (int)by, hk = h / group;
                int start = kv_start ? kv_start[b] : 0;
                start = start < 0 ? 0 : start > Skv ? Skv : start;
                int end = kv_end ? kv_end[b] : Skv;
                end = end < start ? start : end > Skv ? Skv : end;
                const int off = coff ? coff[b] : Skv - Sq;
                const int64_t qbase = ((int64_t)b * H + h) * Sq;
                const int64_t kbase = ((int64_t)b * Hkv + hk) * Skv;
                if (kbase != loaded) {
                    load_rows(P(a.k), dt, kbase, Skv, D, kf);
                    load_rows(P(a.v), dt, kbase, Skv, D, vf);
                    loaded = kbase;
                }
                for (int i = (int)bx * v->bm; i < ((int)bx + 1) * v->bm && i < Sq; ++i) {
                    for (int d = 0; d < D; ++d) q[d] = onnxopt_load(P(a.q), dt, (qbase + i) * D + d);
                    /* The keys the row sees are one run [lo, hi): its padding range, cut at the
                     * query's position (causal) and to the band around it (a window). */
                    const int pos = i + off; /* the query's position among the keys */
                    int lo = start, hi = end;
                    if (a.causal && pos + 1 < hi) hi = pos + 1;
                    if (a.window > 0) {
                        if (pos - a.window > lo) lo = pos - a.window;
                        if (!a.causal && pos + a.window + 1 < hi) hi = pos + a.window + 1;
                    }
                    float m = -INFINITY;
                    for (int j = lo; j < hi; ++j) {
                        float s = dot(q, kf + (int64_t)j * D, D) * a.scale;
                        if (a.bias) {
                            float bv = onnxopt_load(P(a.bias), dt,
                                                    b * a.bias_sb + h * a.bias_sh +
                                                        i * a.bias_sq + j * a.bias_sk);
                            s = bv == -INFINITY ? -INFINITY : s + fmaxf(bv, BIAS_FLOOR);
                        }
                        scores[j] = s;
                        if (s > m) m = s;
                    }
                    /* A row with no visible key (or only -inf logits) is 0, not NaN. */
                    const float m_use = m == -INFINITY ? 0.f : m;
                    float l = 0.f;
                    for (int d = 0; d < D; ++d) acc[d] = 0.f;
                    for (int j = lo; j < hi; ++j) {
                        if (scores[j] == -INFINITY) continue;
                        const float p = expf(scores[j] - m_use);
                        const float *vrow = vf + (int64_t)j * D;
                        l += p;
                        for (int d = 0; d < D; ++d) acc[d] += p * vrow[d];
                    }
                    const float inv = l > 0.f ? 1.f / l : 0.f;
                    for (int d = 0; d < D; ++d)
                        onnxopt_store(W(a.o), dt, (qbase + i) * D + d, acc[d] * inv);
                }
            }
    free(scores), free(kf), free(vf), free(q), free(acc);
    return 0;
}

/* --- LayerNorm / RMSNorm: one block per row ---------------------------------------------------- */

static int host_norm(const struct onnxopt_variant *v, const unsigned grid[3],
                     const unsigned block[3], void *const *argv, char *err) {
    struct onnxopt_layer_norm_args a;
    onnxopt_layer_norm_unpack(argv, &a);
    const int dt = v->dtype, N = a.N;
    const int64_t nvec = N / v->vec;
    if (!vec_ok(v, N, a.x, a.residual, a.gamma, a.beta, a.y, a.sum_out))
        return onnxopt_fail(err, "%s: hidden %d or a pointer does not allow VEC=%d", v->entry, N, v->vec);
    if (block[0] % 32 || block[0] > 1024 || (nvec + block[0] - 1) / block[0] > v->maxit)
        return onnxopt_fail(err, "%s: a block of %u threads cannot hold a row of %d", v->entry, block[0],
                    N);
    float *row = malloc(sizeof(float) * (size_t)N);
    if (!row) return onnxopt_fail(err, "out of host memory");
    for (unsigned r = 0; r < grid[0]; ++r) {
        const int64_t base = (int64_t)r * N;
        double acc = 0.0;
        for (int e = 0; e < N; ++e) {
            float x = onnxopt_load(P(a.x), dt, base + e);
            if (a.residual) {
                x = onnxopt_round(x + onnxopt_load(P(a.residual), dt, base + e), dt);
                if (a.sum_out) onnxopt_store(W(a.sum_out), dt, base + e, x);
            }
            row[e] = x;
            acc += a.rms ? (double)x * x : x;
        }
        float mean = 0.f, var;
        if (a.rms) {
            var = (float)(acc / N);
        } else {
            mean = (float)(acc / N);
            double sq = 0.0;
            for (int e = 0; e < N; ++e) sq += ((double)row[e] - mean) * ((double)row[e] - mean);
            var = (float)(sq / N);
        }
        const float rstd = 1.f / sqrtf(var + a.eps);
        for (int e = 0; e < N; ++e) {
            const float g = a.gamma ? onnxopt_load(P(a.gamma), dt, e) : 1.f;
            const float bt = a.beta ? onnxopt_load(P(a.beta), dt, e) : 0.f;
            onnxopt_store(W(a.y), dt, base + e, (row[e] - mean) * rstd * g + bt);
        }
    }
    free(row);
    return 0;
}

/* --- GroupNorm: one block per (batch row, group) ----------------------------------------------- */

static float silu(float v) { return v / (1.f + expf(-v)); }

static int host_group_norm(const struct onnxopt_variant *v, const unsigned grid[3],
                           const unsigned block[3], void *const *argv, char *err) {
    struct onnxopt_group_norm_args a;
    onnxopt_group_norm_unpack(argv, &a);
    const int dt = v->dtype, groups = a.groups, cg = a.channels_per_group, S = a.spatial;
    const int64_t size = (int64_t)cg * S;
    if (!vec_ok(v, S, a.x, a.y, 0, 0, 0, 0))
        return onnxopt_fail(err, "%s: spatial %d or a pointer does not allow VEC=%d", v->entry, S, v->vec);
    if (block[0] % 32 || block[0] > 1024 ||
        (v->maxit > 0 && (size / v->vec + block[0] - 1) / block[0] > v->maxit) ||
        (v->maxit == 0 && block[0] != 1024))
        return onnxopt_fail(err, "%s: a block of %u threads cannot hold a group of %lld", v->entry,
                    block[0], (long long)size);
    for (unsigned blk = 0; blk < grid[0]; ++blk) {
        const int64_t base = (int64_t)blk * size;
        const int c0 = (int)(blk % (unsigned)groups) * cg;
        double sum = 0.0;
        for (int64_t e = 0; e < size; ++e) sum += onnxopt_load(P(a.x), dt, base + e);
        const float mean = (float)(sum / size);
        double sq = 0.0;
        for (int64_t e = 0; e < size; ++e) {
            const double d = (double)onnxopt_load(P(a.x), dt, base + e) - mean;
            sq += d * d;
        }
        const float rstd = 1.f / sqrtf((float)(sq / size) + a.eps);
        for (int64_t e = 0; e < size; ++e) {
            const int ch = c0 + (int)(e / S);
            const float g = a.gamma ? onnxopt_load(P(a.gamma), dt, ch) : 1.f;
            const float bt = a.beta ? onnxopt_load(P(a.beta), dt, ch) : 0.f;
            float t = (onnxopt_load(P(a.x), dt, base + e) - mean) * rstd * g + bt;
            onnxopt_store(W(a.y), dt, base + e, a.silu ? silu(t) : t);
        }
    }
    return 0;
}

/* --- activations: the grid-stride loop over vectors of VEC elements ---------------------------- */

static float gelu(float t, int approximate) {
    if (approximate == ONNXOPT_GELU_TANH) {
        const float k0 = 0.7978845608028654f; /* sqrt(2 / pi) */
        return 0.5f * t * (1.f + tanhf(k0 * (t + 0.044715f * t * t * t)));
    }
    return 0.5f * t * (1.f + erff(t * 0.7071067811865476f));
}

static int host_gelu(const struct onnxopt_variant *v, const unsigned grid[3],
                     const unsigned block[3], void *const *argv, char *err) {
    struct onnxopt_activations_gelu_args a;
    onnxopt_activations_gelu_unpack(argv, &a);
    const int dt = v->dtype, VEC = v->vec;
    if (!vec_ok(v, a.N, a.x, a.bias, a.y, 0, 0, 0))
        return onnxopt_fail(err, "%s: a row of %d or a pointer does not allow VEC=%d", v->entry, a.N, VEC);
    const int64_t nvec = a.rows * a.N / VEC, stride = (int64_t)grid[0] * block[0];
    for (int64_t t0 = 0; t0 < stride; ++t0)
        for (int64_t i = t0; i < nvec; i += stride)
            for (int e = 0; e < VEC; ++e) {
                const int64_t idx = i * VEC + e;
                float t = onnxopt_load(P(a.x), dt, idx);
                if (a.bias) t += onnxopt_load(P(a.bias), dt, idx % a.N);
                onnxopt_store(W(a.y), dt, idx, gelu(t, a.approximate));
            }
    return 0;
}

static int host_swiglu(const struct onnxopt_variant *v, const unsigned grid[3],
                       const unsigned block[3], void *const *argv, char *err) {
    struct onnxopt_activations_swiglu_args a;
    onnxopt_activations_swiglu_unpack(argv, &a);
    const int dt = v->dtype, VEC = v->vec;
    if (!vec_ok(v, a.N, a.gate, a.up, a.y, 0, 0, 0) || a.in_stride % VEC)
        return onnxopt_fail(err, "%s: a row of %d or a pointer does not allow VEC=%d", v->entry, a.N, VEC);
    const int64_t nvec = a.rows * a.N / VEC, stride = (int64_t)grid[0] * block[0];
    for (int64_t t0 = 0; t0 < stride; ++t0)
        for (int64_t i = t0; i < nvec; i += stride)
            for (int e = 0; e < VEC; ++e) {
                const int64_t idx = i * VEC + e, r = idx / a.N, col = idx % a.N;
                const float g = onnxopt_load(P(a.gate), dt, r * a.in_stride + col);
                const float u = onnxopt_load(P(a.up), dt, r * a.in_stride + col);
                onnxopt_store(W(a.y), dt, idx, silu(g) * u);
            }
    return 0;
}

int onnxopt_host_run(const struct onnxopt_variant *v, const unsigned grid[3],
                     const unsigned block[3], void *const *args, char *err) {
    switch (v->sig) {
    case ONNXOPT_SIG_FLASH_ATTENTION: return host_attention(v, grid, args, err);
    case ONNXOPT_SIG_LAYER_NORM: return host_norm(v, grid, block, args, err);
    case ONNXOPT_SIG_GROUP_NORM: return host_group_norm(v, grid, block, args, err);
    case ONNXOPT_SIG_ACTIVATIONS_GELU: return host_gelu(v, grid, block, args, err);
    case ONNXOPT_SIG_ACTIVATIONS_SWIGLU: return host_swiglu(v, grid, block, args, err);
    default: return onnxopt_fail(err, "%s: no host implementation", v->entry);
    }
}

/*
 * Run the kernel `entry` on host memory as cuLaunchKernel would on the device. Exported for the
 * tests' fake CUDA driver, whose cuLaunchKernel calls it: with it, the whole CUDA path (driver
 * loading, module and function lookup, staging copies, the launch) computes real answers on a
 * machine without a GPU. Returns 0, or -1 with the reason in `err` (ONNXOPT_ERR bytes).
 */
ONNXOPT_EXPORT int onnxopt_ops_host_launch(const char *entry, const unsigned grid[3],
                                           const unsigned block[3], void **args, char *err) {
    const struct onnxopt_variant *v = onnxopt_find_variant(entry);
    if (v == NULL) return onnxopt_fail(err, "no kernel named %s", entry);
    return onnxopt_host_run(v, grid, block, args, err);
}
