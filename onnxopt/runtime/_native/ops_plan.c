/*
 * From an op call to a kernel launch: shape checks, the specialisation, the launch geometry and
 * the packed arguments. One code path for every launcher (GPU, CPU staging through the GPU,
 * host), so the CPU tests run the geometry and the packing the GPU gets.
 *
 * The choices follow the Python launch wrappers of onnxopt/runtime/cuda/ (attention.py,
 * norms.py, activations.py) rule for rule; tests/runtime/test_native_plan.py holds the two to
 * the same answers over a grid of shapes, dtypes and device limits. The error sentences are
 * theirs too.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "ops.h"

int onnxopt_fail(char *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, ONNXOPT_ERR, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *dims_text(const int64_t *dims, int rank, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < rank && n < size; ++i)
        n += (size_t)snprintf(buf + n, size - n, i ? ", %" PRId64 : "%" PRId64, dims[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int same_dims(const struct onnxopt_tensor *a, const struct onnxopt_tensor *b) {
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; ++i)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}

static int is_vector(const struct onnxopt_tensor *t, int64_t n) {
    return t->rank == 1 && t->dims[0] == n;
}

static int64_t product(const int64_t *dims, int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; ++i) p *= dims[i];
    return p;
}

static int aligned16(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f) {
    return a % 16 == 0 && b % 16 == 0 && c % 16 == 0 && d % 16 == 0 && e % 16 == 0 &&
           f % 16 == 0;
}

static uint64_t ptr(const struct onnxopt_tensor *t) { return (uint64_t)(uintptr_t)t->data; }

int onnxopt_elem_bytes(int dtype) { return dtype == 1 ? 4 : 2; }

const struct onnxopt_variant *onnxopt_find_variant(const char *entry) {
    for (int i = 0; i < ONNXOPT_NVARIANTS; ++i)
        if (strcmp(onnxopt_variants[i].entry, entry) == 0) return &onnxopt_variants[i];
    return NULL;
}

static const char *dtype_name(int dtype) {
    return dtype == 1 ? "float32" : dtype == 10 ? "float16" : "bfloat16";
}

/* The 128-row tile unless it leaves multiprocessors idle (attention.select_variant). */
const struct onnxopt_variant *onnxopt_choose_attention(int dtype, int head,
                                                       const struct onnxopt_limits *limits,
                                                       int64_t sq, int64_t batch_heads,
                                                       char *err) {
    if (head <= 0 || head > ONNXOPT_FA_MAX_HEAD || head % ONNXOPT_FA_HEAD_MULTIPLE) {
        onnxopt_fail(err, "head size %d is not a multiple of %d up to %d", head,
             ONNXOPT_FA_HEAD_MULTIPLE, ONNXOPT_FA_MAX_HEAD);
        return NULL;
    }
    int dmax = 0;
    for (int i = 0; i < ONNXOPT_NVARIANTS; ++i) {
        const struct onnxopt_variant *v = &onnxopt_variants[i];
        if (v->family == ONNXOPT_FAMILY_FLASH_ATTENTION && v->dtype == dtype &&
            v->dmax >= head && (dmax == 0 || v->dmax < dmax))
            dmax = v->dmax;
    }
    if (dmax == 0) {
        onnxopt_fail(err, "no %s attention kernel", dtype_name(dtype));
        return NULL;
    }
    /* the bucket, largest tile first */
    const struct onnxopt_variant *bucket[8];
    int n = 0;
    for (int i = 0; i < ONNXOPT_NVARIANTS && n < 8; ++i) {
        const struct onnxopt_variant *v = &onnxopt_variants[i];
        if (v->family == ONNXOPT_FAMILY_FLASH_ATTENTION && v->dtype == dtype && v->dmax == dmax)
            bucket[n++] = v;
    }
    for (int i = 1; i < n; ++i)
        for (int j = i; j > 0 && (bucket[j]->bm > bucket[j - 1]->bm ||
                                  (bucket[j]->bm == bucket[j - 1]->bm &&
                                   bucket[j]->bn > bucket[j - 1]->bn)); --j) {
            const struct onnxopt_variant *t = bucket[j];
            bucket[j] = bucket[j - 1];
            bucket[j - 1] = t;
        }
    const struct onnxopt_variant *fitting[8];
    int nf = 0;
    for (int i = 0; i < n; ++i)
        if (bucket[i]->smem <= limits->smem_optin) fitting[nf++] = bucket[i];
    if (nf == 0) {
        onnxopt_fail(err, "%s needs %d bytes of shared memory, the device allows %d",
             bucket[n - 1]->entry, bucket[n - 1]->smem, limits->smem_optin);
        return NULL;
    }
    if (limits->sm_count) {
        for (int i = 0; i < nf; ++i)
            if (batch_heads * cdiv(sq, fitting[i]->bm) >= limits->sm_count) return fitting[i];
        return fitting[nf - 1];
    }
    return fitting[0];
}

static int block_threads(int64_t nvec) {
    int64_t t = cdiv(cdiv(nvec, 2), 32) * 32;
    return (int)(t < 32 ? 32 : t > 1024 ? 1024 : t);
}

/* The widest vector the hidden size and the pointers allow, about two vectors per thread. */
const struct onnxopt_variant *onnxopt_choose_norm(int dtype, int64_t hidden, int aligned,
                                                  int *threads, char *err) {
    const struct onnxopt_variant *best = NULL;
    for (int vec = 8; vec >= 1; vec /= 2) {
        for (int i = 0; i < ONNXOPT_NVARIANTS; ++i) {
            const struct onnxopt_variant *v = &onnxopt_variants[i];
            if (v->family != ONNXOPT_FAMILY_LAYER_NORM || v->dtype != dtype || v->vec != vec)
                continue;
            if (hidden % vec || (vec > 1 && !aligned)) continue;
            int64_t nvec = hidden / vec;
            int t = block_threads(nvec);
            if (cdiv(nvec, t) <= v->maxit) {
                *threads = t;
                return v;
            }
            best = v;
        }
    }
    (void)best;
    char limits[128] = "";
    size_t used = 0;
    for (int vec = 8; vec >= 1; vec /= 2)
        for (int i = 0; i < ONNXOPT_NVARIANTS; ++i) {
            const struct onnxopt_variant *v = &onnxopt_variants[i];
            if (v->family == ONNXOPT_FAMILY_LAYER_NORM && v->dtype == dtype && v->vec == vec)
                used += (size_t)snprintf(limits + used, sizeof limits - used, "%s%d with VEC=%d",
                                         used ? ", " : "", v->maxit * 1024 * v->vec, v->vec);
        }
    onnxopt_fail(err, "hidden size %" PRId64 " is above the supported maximum for %s (%s; VEC > 1 "
              "needs hidden %% VEC == 0 and 16-byte aligned pointers)",
         hidden, dtype_name(dtype), limits);
    return NULL;
}

/* Registers when the group fits (two vectors per thread), else the streaming variant. */
const struct onnxopt_variant *onnxopt_choose_group_norm(int dtype, int64_t group,
                                                        int64_t spatial, int aligned,
                                                        int *threads, char *err) {
    if (group > ONNXOPT_GN_MAX_GROUP) {
        onnxopt_fail(err, "a group holds %" PRId64 " elements, above the kernel's limit of %lld "
                  "(int32 indexing inside a group)", group, (long long)ONNXOPT_GN_MAX_GROUP);
        return NULL;
    }
    int vec = 1;
    for (int i = 0; i < ONNXOPT_NVARIANTS; ++i) {
        const struct onnxopt_variant *v = &onnxopt_variants[i];
        if (v->family == ONNXOPT_FAMILY_GROUP_NORM && v->dtype == dtype && v->vec > vec &&
            spatial % v->vec == 0 && aligned)
            vec = v->vec;
    }
    const struct onnxopt_variant *cached = NULL, *streamed = NULL;
    for (int i = 0; i < ONNXOPT_NVARIANTS; ++i) {
        const struct onnxopt_variant *v = &onnxopt_variants[i];
        if (v->family != ONNXOPT_FAMILY_GROUP_NORM || v->dtype != dtype || v->vec != vec)
            continue;
        if (v->maxit > 0) cached = v;
        else streamed = v;
    }
    if (cached == NULL || streamed == NULL) {
        onnxopt_fail(err, "no %s group norm kernel", dtype_name(dtype));
        return NULL;
    }
    int64_t nvec = group / vec;
    int t = block_threads(nvec);
    if (cdiv(nvec, t) <= cached->maxit) {
        *threads = t;
        return cached;
    }
    *threads = 1024;
    return streamed;
}

const struct onnxopt_variant *onnxopt_choose_activation(int sig, int dtype, int64_t cols,
                                                        int aligned, char *err) {
    for (int vec = 8; vec >= 1; vec /= 2)
        for (int i = 0; i < ONNXOPT_NVARIANTS; ++i) {
            const struct onnxopt_variant *v = &onnxopt_variants[i];
            if (v->sig == sig && v->dtype == dtype && v->vec == vec &&
                (vec == 1 || (cols % vec == 0 && aligned)))
                return v;
        }
    onnxopt_fail(err, "no %s kernel for %s", onnxopt_sig_names[sig], dtype_name(dtype));
    return NULL;
}

static void set3(unsigned *d, int64_t x, int64_t y, int64_t z) {
    d[0] = (unsigned)x;
    d[1] = (unsigned)y;
    d[2] = (unsigned)z;
}

static int fits_i32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }

/* --- attention -------------------------------------------------------------------------------- */

static int plan_attention(const struct onnxopt_call *c, const struct onnxopt_limits *limits,
                          struct onnxopt_launch *l, char *err) {
    const struct onnxopt_tensor *q = &c->in[0], *k = &c->in[1], *v = &c->in[2];
    char a[96], b[96], d[96];
    if (q->rank != k->rank || q->rank != v->rank || (q->rank != 3 && q->rank != 4))
        return onnxopt_fail(err, "Q, K, V must all be rank 4 (BNSH) or rank 3, got %s, %s, %s",
                    dims_text(q->dims, q->rank, a, sizeof a),
                    dims_text(k->dims, k->rank, b, sizeof b),
                    dims_text(v->dims, v->rank, d, sizeof d));
    int64_t qs[4], ks[4];
    if (q->rank == 3) {
        int64_t q4[4] = {q->dims[0], 1, q->dims[1], q->dims[2]};
        int64_t k4[4] = {k->dims[0], 1, k->dims[1], k->dims[2]};
        memcpy(qs, q4, sizeof qs);
        memcpy(ks, k4, sizeof ks);
    } else {
        memcpy(qs, q->dims, sizeof qs);
        memcpy(ks, k->dims, sizeof ks);
    }
    if (!same_dims(k, v))
        return onnxopt_fail(err, "K %s and V %s must have one shape", dims_text(ks, 4, a, sizeof a),
                    dims_text(v->rank == 3 ? ks : v->dims, 4, b, sizeof b));
    int64_t B = qs[0], H = qs[1], Sq = qs[2], D = qs[3], Hkv = ks[1], Skv = ks[2];
    if (ks[0] != B || ks[3] != D)
        return onnxopt_fail(err, "Q %s and K %s disagree on batch or head size",
                    dims_text(qs, 4, a, sizeof a), dims_text(ks, 4, b, sizeof b));
    if (Hkv == 0 ? H != 0 : H % Hkv)
        return onnxopt_fail(err, "%" PRId64 " query heads cannot share %" PRId64 " key/value heads", H,
                    Hkv);
    static const char *const rows[] = {"kv_start", "kv_end", "causal_offset"};
    for (int i = 0; i < 3; ++i) {
        const struct onnxopt_tensor *t = &c->in[4 + i];
        if (t->data != NULL && !is_vector(t, B))
            return onnxopt_fail(err, "%s must be [%" PRId64 "], got %s", rows[i], B,
                        dims_text(t->dims, t->rank, a, sizeof a));
    }
    l->variant = NULL;
    if (B == 0 || H == 0 || Sq == 0) return 0;
    if (D <= 0) return onnxopt_fail(err, "D must be positive, got %" PRId64, D);
    if (H > 65535 || B > 65535)
        return onnxopt_fail(err, "grid limit: H=%" PRId64 " and B=%" PRId64 " must each be <= 65535", H,
                    B);
    if (!fits_i32(Sq) || !fits_i32(Skv))
        return onnxopt_fail(err, "sequence lengths %" PRId64 ", %" PRId64 " do not fit in int32", Sq,
                    Skv);
    if (!aligned16(ptr(q), ptr(k), ptr(v), ptr(&c->out[0]), 0, 0))
        return onnxopt_fail(err, "q, k, v and o must be 16-byte aligned");
    int64_t strides[4] = {0, 0, 0, 0};
    const struct onnxopt_tensor *bias = &c->in[3];
    if (bias->data != NULL) {
        int64_t shape[4] = {1, 1, 1, 1};
        int rank = bias->rank;
        if (rank > 4)
            return onnxopt_fail(err, "the bias has rank %d; at most 4 ([B, H, Sq, Skv])", rank);
        if (q->rank == 3 && rank == 3) { /* one head: [B, Sq, Skv] is [B, 1, Sq, Skv] */
            shape[0] = bias->dims[0];
            shape[2] = bias->dims[1];
            shape[3] = bias->dims[2];
        } else {
            for (int i = 0; i < rank; ++i) shape[4 - rank + i] = bias->dims[i];
        }
        const int64_t full[4] = {B, H, Sq, Skv};
        int64_t step = 1;
        for (int axis = 3; axis >= 0; --axis) {
            if (shape[axis] != 1 && shape[axis] != full[axis])
                return onnxopt_fail(err, "a bias of shape %s does not broadcast to %s",
                            dims_text(bias->dims, rank, a, sizeof a),
                            dims_text(full, 4, b, sizeof b));
            strides[axis] = shape[axis] != 1 ? step : 0;
            step *= shape[axis];
        }
    }
    const struct onnxopt_variant *var =
        onnxopt_choose_attention(c->dtype, (int)D, limits, Sq, B * H, err);
    if (var == NULL) return -1;
    double scale = c->attrs->number[0];
    struct onnxopt_flash_attention_args *p = &l->storage.fa;
    p->q = ptr(q);
    p->k = ptr(k);
    p->v = ptr(v);
    p->o = ptr(&c->out[0]);
    p->bias = ptr(bias);
    p->bias_sb = strides[0];
    p->bias_sh = strides[1];
    p->bias_sq = strides[2];
    p->bias_sk = strides[3];
    p->kv_start = ptr(&c->in[4]);
    p->kv_end = ptr(&c->in[5]);
    p->causal_off = ptr(&c->in[6]);
    p->H = (int32_t)H;
    p->Hkv = (int32_t)Hkv;
    p->Sq = (int32_t)Sq;
    p->Skv = (int32_t)Skv;
    p->D = (int32_t)D;
    p->scale = (float)(scale != 0.0 ? scale : 1.0 / sqrt((double)D));
    p->causal = c->attrs->number[1] != 0.0;
    p->window = (int32_t)(c->attrs->number[2] > 0.0 ? c->attrs->number[2] : 0.0);
    onnxopt_flash_attention_pack(p, l->args);
    l->variant = var;
    set3(l->grid, cdiv(Sq, var->bm), H, B);
    set3(l->block, 32 * var->warps, 1, 1);
    l->smem = (unsigned)var->smem;
    return 0;
}

/* --- LayerNorm / RMSNorm ---------------------------------------------------------------------- */

static int plan_norm(const struct onnxopt_call *c, int rms, struct onnxopt_launch *l,
                     char *err) {
    const struct onnxopt_tensor *x = &c->in[0], *gamma = &c->in[1];
    const struct onnxopt_tensor *beta = rms ? NULL : &c->in[2];
    const struct onnxopt_tensor *residual = &c->in[rms ? 2 : 3];
    char a[96], b[96];
    if (x->rank < 1) return onnxopt_fail(err, "X must have at least one axis");
    int64_t hidden = x->dims[x->rank - 1];
    if (gamma->data != NULL && !is_vector(gamma, hidden))
        return onnxopt_fail(err, "gamma must be [%" PRId64 "], got %s", hidden,
                    dims_text(gamma->dims, gamma->rank, a, sizeof a));
    if (beta != NULL && beta->data != NULL && !is_vector(beta, hidden))
        return onnxopt_fail(err, "beta must be [%" PRId64 "], got %s", hidden,
                    dims_text(beta->dims, beta->rank, a, sizeof a));
    if (residual->data != NULL && !same_dims(residual, x))
        return onnxopt_fail(err, "residual must be shaped like X %s, got %s",
                    dims_text(x->dims, x->rank, a, sizeof a),
                    dims_text(residual->dims, residual->rank, b, sizeof b));
    if (c->out[1].data != NULL && residual->data == NULL)
        return onnxopt_fail(err, "the sum output S needs a residual input");
    int64_t rows = product(x->dims, 0, x->rank - 1);
    l->variant = NULL;
    if (rows == 0) return 0;
    if (hidden <= 0) return onnxopt_fail(err, "hidden must be positive, got %" PRId64, hidden);
    if (rows >= INT32_MAX) return onnxopt_fail(err, "rows=%" PRId64 " exceeds the grid limit", rows);
    if (!fits_i32(hidden)) return onnxopt_fail(err, "hidden size %" PRId64 " does not fit", hidden);
    struct onnxopt_layer_norm_args *p = &l->storage.ln;
    p->x = ptr(x);
    p->residual = ptr(residual);
    p->gamma = ptr(gamma);
    p->beta = beta != NULL ? ptr(beta) : 0;
    p->y = ptr(&c->out[0]);
    p->sum_out = ptr(&c->out[1]);
    p->N = (int32_t)hidden;
    p->eps = (float)c->attrs->number[0];
    p->rms = rms;
    int threads = 0;
    const struct onnxopt_variant *v = onnxopt_choose_norm(
        c->dtype, hidden, aligned16(p->x, p->residual, p->gamma, p->beta, p->y, p->sum_out),
        &threads, err);
    if (v == NULL) return -1;
    onnxopt_layer_norm_pack(p, l->args);
    l->variant = v;
    set3(l->grid, rows, 1, 1);
    set3(l->block, threads, 1, 1);
    l->smem = (unsigned)v->smem;
    return 0;
}

/* --- GroupNorm -------------------------------------------------------------------------------- */

static int plan_group_norm(const struct onnxopt_call *c, struct onnxopt_launch *l, char *err) {
    const struct onnxopt_tensor *x = &c->in[0];
    char a[96];
    if (x->rank < 2)
        return onnxopt_fail(err, "X must be [N, C, ...], got %s", dims_text(x->dims, x->rank, a, sizeof a));
    int64_t batch = x->dims[0], channels = x->dims[1];
    int64_t groups = (int64_t)c->attrs->number[0];
    if (groups <= 0 || channels % groups)
        return onnxopt_fail(err, "%" PRId64 " channels do not split into %" PRId64 " groups", channels,
                    groups);
    static const char *const names[] = {"gamma", "beta"};
    for (int i = 0; i < 2; ++i) {
        const struct onnxopt_tensor *t = &c->in[1 + i];
        if (t->data != NULL && !is_vector(t, channels))
            return onnxopt_fail(err, "%s must be [%" PRId64 "], got %s", names[i], channels,
                        dims_text(t->dims, t->rank, a, sizeof a));
    }
    const char *activation = c->attrs->text[2];
    int silu = strcmp(activation, "silu") == 0;
    if (!silu && activation[0] != '\0')
        return onnxopt_fail(err, "activation must be '' or 'silu', got '%s'", activation);
    int64_t spatial = product(x->dims, 2, x->rank);
    l->variant = NULL;
    if (batch == 0 || spatial == 0) return 0;
    if (batch * groups > ONNXOPT_GN_MAX_BLOCKS)
        return onnxopt_fail(err, "batch * groups = %" PRId64 " exceeds the grid limit", batch * groups);
    int64_t per_group = channels / groups;
    struct onnxopt_group_norm_args *p = &l->storage.gn;
    p->x = ptr(x);
    p->gamma = ptr(&c->in[1]);
    p->beta = ptr(&c->in[2]);
    p->y = ptr(&c->out[0]);
    int threads = 0;
    /* gamma/beta are read one value per channel: their alignment does not matter */
    const struct onnxopt_variant *v = onnxopt_choose_group_norm(
        c->dtype, per_group * spatial, spatial, aligned16(p->x, p->y, 0, 0, 0, 0), &threads, err);
    if (v == NULL) return -1;
    if (!fits_i32(spatial)) return onnxopt_fail(err, "spatial size %" PRId64 " does not fit", spatial);
    p->groups = (int32_t)groups;
    p->channels_per_group = (int32_t)per_group;
    p->spatial = (int32_t)spatial;
    p->eps = (float)c->attrs->number[1];
    p->silu = silu ? ONNXOPT_GN_SILU : 0;
    onnxopt_group_norm_pack(p, l->args);
    l->variant = v;
    set3(l->grid, batch * groups, 1, 1);
    set3(l->block, threads, 1, 1);
    l->smem = (unsigned)v->smem;
    return 0;
}

/* --- BiasGelu / SwiGLU ------------------------------------------------------------------------ */

#define ACT_THREADS 256 /* activations.THREADS */

static void grid_stride(struct onnxopt_launch *l, const struct onnxopt_limits *limits,
                        int64_t n_vectors) {
    /* enough blocks to fill the device a few times over, no more */
    int64_t sms = limits->sm_count ? limits->sm_count : 1;
    int64_t blocks = cdiv(n_vectors, ACT_THREADS);
    if (blocks > sms * 16) blocks = sms * 16;
    set3(l->grid, blocks < 1 ? 1 : blocks, 1, 1);
    set3(l->block, ACT_THREADS, 1, 1);
}

static void rows_cols(const struct onnxopt_tensor *t, int64_t *rows, int64_t *cols) {
    *cols = t->rank ? t->dims[t->rank - 1] : 1;
    *rows = t->rank ? product(t->dims, 0, t->rank - 1) : 1;
}

static int plan_gelu(const struct onnxopt_call *c, const struct onnxopt_limits *limits,
                     struct onnxopt_launch *l, char *err) {
    const struct onnxopt_tensor *x = &c->in[0], *bias = &c->in[1];
    char a[96];
    int64_t rows, cols;
    rows_cols(x, &rows, &cols);
    if (bias->data != NULL && !is_vector(bias, cols))
        return onnxopt_fail(err, "bias must be [%" PRId64 "], got %s", cols,
                    dims_text(bias->dims, bias->rank, a, sizeof a));
    const char *approximate = c->attrs->text[0];
    int code = strcmp(approximate, "none") == 0   ? ONNXOPT_GELU_NONE
               : strcmp(approximate, "tanh") == 0 ? ONNXOPT_GELU_TANH
                                                  : -1;
    if (code < 0) return onnxopt_fail(err, "approximate must be 'none' or 'tanh', got '%s'", approximate);
    l->variant = NULL;
    if (rows * cols == 0) return 0;
    if (!fits_i32(cols)) return onnxopt_fail(err, "a row of %" PRId64 " does not fit", cols);
    struct onnxopt_activations_gelu_args *p = &l->storage.gelu;
    p->x = ptr(x);
    p->bias = ptr(bias);
    p->y = ptr(&c->out[0]);
    p->rows = rows;
    p->N = (int32_t)cols;
    p->approximate = code;
    const struct onnxopt_variant *v = onnxopt_choose_activation(
        ONNXOPT_SIG_ACTIVATIONS_GELU, c->dtype, cols, aligned16(p->x, p->bias, p->y, 0, 0, 0),
        err);
    if (v == NULL) return -1;
    onnxopt_activations_gelu_pack(p, l->args);
    l->variant = v;
    grid_stride(l, limits, rows * cols / v->vec);
    l->smem = (unsigned)v->smem;
    return 0;
}

static int plan_swiglu(const struct onnxopt_call *c, const struct onnxopt_limits *limits,
                       struct onnxopt_launch *l, char *err) {
    const struct onnxopt_tensor *gate = &c->in[0], *up = &c->in[1];
    char a[96], b[96];
    if (!same_dims(gate, up))
        return onnxopt_fail(err, "gate %s and up %s must have one shape",
                    dims_text(gate->dims, gate->rank, a, sizeof a),
                    dims_text(up->dims, up->rank, b, sizeof b));
    int64_t rows, cols;
    rows_cols(gate, &rows, &cols);
    l->variant = NULL;
    if (rows * cols == 0) return 0;
    if (!fits_i32(cols)) return onnxopt_fail(err, "a row of %" PRId64 " does not fit", cols);
    struct onnxopt_activations_swiglu_args *p = &l->storage.swiglu;
    p->gate = ptr(gate);
    p->up = ptr(up);
    p->y = ptr(&c->out[0]);
    p->rows = rows;
    p->N = (int32_t)cols;
    p->in_stride = cols; /* two tensors: rows are a row apart */
    const struct onnxopt_variant *v = onnxopt_choose_activation(
        ONNXOPT_SIG_ACTIVATIONS_SWIGLU, c->dtype, cols, aligned16(p->gate, p->up, p->y, 0, 0, 0),
        err);
    if (v == NULL) return -1;
    onnxopt_activations_swiglu_pack(p, l->args);
    l->variant = v;
    grid_stride(l, limits, rows * cols / v->vec);
    l->smem = (unsigned)v->smem;
    return 0;
}

/* --- dispatch --------------------------------------------------------------------------------- */

int onnxopt_output_shapes(const struct onnxopt_call *call, char *err) {
    /* Every output of every op is shaped like the first input (O like Q, Y and S like X). */
    (void)err;
    return call->in[0].rank;
}

int onnxopt_plan(const struct onnxopt_call *c, const struct onnxopt_limits *limits,
                 struct onnxopt_launch *l, char *err) {
    memset(l, 0, sizeof *l);
    const char *op = c->op->name;
    if (strcmp(op, "FlashAttention") == 0) return plan_attention(c, limits, l, err);
    if (strcmp(op, "LayerNorm") == 0) return plan_norm(c, 0, l, err);
    if (strcmp(op, "RMSNorm") == 0) return plan_norm(c, 1, l, err);
    if (strcmp(op, "GroupNorm") == 0) return plan_group_norm(c, l, err);
    if (strcmp(op, "BiasGelu") == 0) return plan_gelu(c, limits, l, err);
    if (strcmp(op, "SwiGLU") == 0) return plan_swiglu(c, limits, l, err);
    return onnxopt_fail(err, "no plan for op %s", op);
}
