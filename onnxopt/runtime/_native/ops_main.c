/*
 * RegisterCustomOps and the OrtCustomOp structs of domain ai.onnxopt.cuda.
 *
 * Every op of kernels/<family>.json ("ops") is registered once per dtype (float32, float16, bfloat16:
 * ORT picks among the kernels of one name by input type) and per execution provider: for
 * CUDAExecutionProvider it launches the CUDA kernel on ORT's compute stream; for
 * CPUExecutionProvider it runs the kernel's host implementation, or, where the session config
 * entry "onnxopt.cpu_kernels" is "staged", the CUDA kernel through device memory (a machine with
 * a GPU but a CPU-only ONNX Runtime: the GPU check). ORT places each node on the first provider
 * in the session's list that has a kernel for it, so the host code runs only where the CPU
 * provider was chosen.
 *
 * Everything ORT points into (the structs, their names) is static: it lives as long as the
 * library stays loaded, which ORT ensures while any session or session options use it. Every
 * failure is an OrtStatus naming the op, its dtype and provider, and the reason; nothing here
 * aborts or prints.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "half.h"
#include "ops.h"
#include "ort_abi.h"

#ifndef ONNXOPT_OPS_SOURCE_HASH
#define ONNXOPT_OPS_SOURCE_HASH ""
#endif

#define DOMAIN "ai.onnxopt.cuda"
#define CONFIG_KEY "onnxopt.cpu_kernels"
static const char *const CPU_EP = "CPUExecutionProvider";
static const char *const CUDA_EP = "CUDAExecutionProvider";
static const int DTYPES[3] = {ORT_TYPE_FLOAT, ORT_TYPE_FLOAT16, ORT_TYPE_BFLOAT16};

enum { RUN_HOST, RUN_CUDA, RUN_STAGED };

struct op_def {
    OrtCustomOp base; /* first: ORT's OrtCustomOp* is this struct's address */
    const struct onnxopt_op_spec *spec;
    int dtype;
    int run;
    char label[96]; /* "ai.onnxopt.cuda::RMSNorm (float16, CPUExecutionProvider)" */
};

struct kernel {
    const struct op_def *op;
    struct onnxopt_attrs attrs;
};

static _Atomic(OrtApiTable) g_api;

static OrtStatus *status(int code, const struct op_def *op, const char *fmt, ...) {
    char msg[ONNXOPT_ERR + 128];
    int n = snprintf(msg, sizeof msg, "%s: ", op ? op->label : DOMAIN);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    return ORT_CALL(atomic_load(&g_api), CreateStatus, code, msg);
}

static const struct op_def *def(const OrtCustomOp *op) { return (const struct op_def *)op; }

/* --- what ORT asks of an op -------------------------------------------------------------------- */

static const char *op_name(const OrtCustomOp *op) { return def(op)->spec->name; }

static const char *op_provider(const OrtCustomOp *op) {
    return def(op)->run == RUN_CUDA ? CUDA_EP : CPU_EP;
}

static int port_type(const struct op_def *d, const struct onnxopt_port *p) {
    return p->type ? p->type : d->dtype;
}

static int input_type(const OrtCustomOp *op, size_t i) {
    const struct op_def *d = def(op);
    return i < (size_t)d->spec->n_inputs ? port_type(d, &d->spec->inputs[i]) : ORT_TYPE_UNDEFINED;
}

static size_t input_count(const OrtCustomOp *op) { return (size_t)def(op)->spec->n_inputs; }

static int output_type(const OrtCustomOp *op, size_t i) {
    const struct op_def *d = def(op);
    return i < (size_t)d->spec->n_outputs ? port_type(d, &d->spec->outputs[i])
                                          : ORT_TYPE_UNDEFINED;
}

static size_t output_count(const OrtCustomOp *op) { return (size_t)def(op)->spec->n_outputs; }

static int input_characteristic(const OrtCustomOp *op, size_t i) {
    const struct op_def *d = def(op);
    return i < (size_t)d->spec->n_inputs && d->spec->inputs[i].optional ? ORT_OPTIONAL
                                                                       : ORT_REQUIRED;
}

static int output_characteristic(const OrtCustomOp *op, size_t i) {
    const struct op_def *d = def(op);
    return i < (size_t)d->spec->n_outputs && d->spec->outputs[i].optional ? ORT_OPTIONAL
                                                                         : ORT_REQUIRED;
}

static int memory_type(const OrtCustomOp *op, size_t i) { return ORT_MEM_DEFAULT; }
static int one(const OrtCustomOp *op) { return 1; }

/* The version-1 callbacks are never called (the V2 ones are set), but must not be NULL. */
static void *create_kernel_v1(const OrtCustomOp *op, OrtApiTable api, const OrtKernelInfo *info) {
    return NULL;
}
static void compute_v1(void *kernel, OrtKernelContext *context) {}

static void destroy_kernel(void *kernel) { free(kernel); }

/* --- attributes, read once per node ---------------------------------------------------------- */

static int missing(OrtApiTable api, OrtStatus *s) {
    const char *msg = ORT_CALL(api, GetErrorMessage, s);
    return msg != NULL && strstr(msg, "No attribute") != NULL;
}

static OrtStatus *read_attribute(OrtApiTable api, const struct op_def *d,
                                 const OrtKernelInfo *info, int i, struct onnxopt_attrs *out) {
    const struct onnxopt_attr_spec *a = &d->spec->attrs[i];
    OrtStatus *s = NULL;
    if (a->kind == ONNXOPT_ATTR_FLOAT) {
        float v = 0.f;
        if (!(s = ORT_CALL(api, KernelInfoGetAttribute_float, info, a->name, &v)))
            out->number[i] = v;
    } else if (a->kind == ONNXOPT_ATTR_INT) {
        int64_t v = 0;
        if (!(s = ORT_CALL(api, KernelInfoGetAttribute_int64, info, a->name, &v)))
            out->number[i] = (double)v;
    } else {
        size_t size = 0;
        s = ORT_CALL(api, KernelInfoGetAttribute_string, info, a->name, NULL, &size);
        if (!s && size > sizeof out->text[i])
            return status(ORT_INVALID_ARGUMENT, d, "attribute '%s' is longer than %zu bytes",
                          a->name, sizeof out->text[i] - 1);
        if (!s) s = ORT_CALL(api, KernelInfoGetAttribute_string, info, a->name, out->text[i],
                             &size);
    }
    if (s == NULL) return NULL;
    int absent = missing(api, s);
    char reason[256];
    snprintf(reason, sizeof reason, "%s", ORT_CALL(api, GetErrorMessage, s));
    ORT_CALL(api, ReleaseStatus, s);
    if (absent && !a->required) {
        out->number[i] = a->number;
        snprintf(out->text[i], sizeof out->text[i], "%s", a->text);
        return NULL;
    }
    static const char *const kinds[] = {"", "float", "int", "string"};
    return status(ORT_INVALID_ARGUMENT, d, "attribute '%s' (%s) %s: %s", a->name, kinds[a->kind],
                  absent ? "is required and the node does not set it" : "cannot be read",
                  reason);
}

static OrtStatus *create_kernel(const OrtCustomOp *op, OrtApiTable api,
                                const OrtKernelInfo *info, void **out) {
    const struct op_def *d = def(op);
    struct kernel *k = calloc(1, sizeof *k);
    if (k == NULL) return status(ORT_FAIL, d, "out of memory");
    k->op = d;
    for (int i = 0; i < d->spec->n_attrs; ++i) {
        OrtStatus *s = read_attribute(api, d, info, i, &k->attrs);
        if (s != NULL) {
            free(k);
            return s;
        }
    }
    *out = k;
    return NULL;
}

/* --- one call ---------------------------------------------------------------------------------- */

static _Alignas(64) char empty_tensor[64]; /* the data of a present tensor with no elements */

static OrtStatus *read_tensor(OrtApiTable api, const struct op_def *d, const OrtValue *value,
                              struct onnxopt_tensor *t) {
    OrtTensorTypeAndShapeInfo *info = NULL;
    OrtStatus *s = ORT_CALL(api, GetTensorTypeAndShape, value, &info);
    if (s) return s;
    size_t rank = 0;
    s = ORT_CALL(api, GetDimensionsCount, info, &rank);
    if (!s && rank > ONNXOPT_MAX_RANK) {
        ORT_CALL(api, ReleaseTensorTypeAndShapeInfo, info);
        return status(ORT_INVALID_ARGUMENT, d, "a tensor of rank %zu (at most %d)", rank,
                      ONNXOPT_MAX_RANK);
    }
    if (!s) s = ORT_CALL(api, GetDimensions, info, t->dims, rank);
    ORT_CALL(api, ReleaseTensorTypeAndShapeInfo, info);
    if (s) return s;
    t->rank = (int)rank;
    void *data = NULL;
    if ((s = ORT_CALL(api, GetTensorMutableData, (OrtValue *)value, &data))) return s;
    t->data = data ? data : empty_tensor;
    return NULL;
}

static int64_t elements(const struct onnxopt_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; ++i) n *= t->dims[i];
    return n;
}

static size_t tensor_bytes(const struct op_def *d, const struct onnxopt_port *p,
                           const struct onnxopt_tensor *t) {
    int type = port_type(d, p);
    return (size_t)elements(t) * (size_t)(type == ORT_TYPE_INT32 ? 4 : onnxopt_elem_bytes(type));
}

static OrtStatus *run_host(const struct op_def *d, struct onnxopt_call *call) {
    char err[ONNXOPT_ERR];
    const struct onnxopt_limits host = {80, ONNXOPT_HOST_SMEM_OPTIN, 0};
    struct onnxopt_launch launch;
    if (onnxopt_plan(call, &host, &launch, err)) return status(ORT_INVALID_ARGUMENT, d, "%s", err);
    if (launch.variant && onnxopt_host_run(launch.variant, launch.grid, launch.block, launch.args,
                                           err))
        return status(ORT_RUNTIME_EXCEPTION, d, "%s", err);
    return NULL;
}

static OrtStatus *run_cuda(OrtApiTable api, const struct op_def *d, OrtKernelContext *ctx,
                           struct onnxopt_call *call) {
    char err[ONNXOPT_ERR];
    void *stream = NULL;
    OrtStatus *s = ORT_CALL(api, KernelContext_GetGPUComputeStream, ctx, &stream);
    if (s) return s;
    struct onnxopt_device dev;
    int pushed = 0;
    if (onnxopt_cuda_enter(&dev, &pushed, err)) return status(ORT_EP_FAIL, d, "%s", err);
    struct onnxopt_launch launch;
    int code = 0;
    if (onnxopt_plan(call, &dev.limits, &launch, err)) code = ORT_INVALID_ARGUMENT;
    else if (launch.variant && onnxopt_cuda_launch(&dev, &launch, stream, err)) code = ORT_EP_FAIL;
    onnxopt_cuda_leave(pushed);
    return code ? status(code, d, "%s", err) : NULL;
}

/* The CPU provider's tensors copied to the device, the CUDA kernel run, the outputs copied back. */
static OrtStatus *run_staged(const struct op_def *d, struct onnxopt_call *call) {
    char err[ONNXOPT_ERR] = "";
    struct onnxopt_device dev;
    int pushed = 0;
    if (onnxopt_cuda_enter(&dev, &pushed, err)) return status(ORT_EP_FAIL, d, "%s", err);
    struct onnxopt_call staged = *call;
    uint64_t device_in[ONNXOPT_MAX_PORTS] = {0}, device_out[2] = {0};
    int code = 0;
    for (int i = 0; i < d->spec->n_inputs && !code; ++i)
        if (call->in[i].data != NULL) {
            if (onnxopt_cuda_stage_in(call->in[i].data,
                                      tensor_bytes(d, &d->spec->inputs[i], &call->in[i]),
                                      &device_in[i], err))
                code = ORT_EP_FAIL;
            staged.in[i].data = (void *)(uintptr_t)device_in[i];
        }
    for (int i = 0; i < d->spec->n_outputs && !code; ++i)
        if (call->out[i].data != NULL) {
            if (onnxopt_cuda_alloc(tensor_bytes(d, &d->spec->outputs[i], &call->out[i]),
                                   &device_out[i], err))
                code = ORT_EP_FAIL;
            staged.out[i].data = (void *)(uintptr_t)device_out[i];
        }
    struct onnxopt_launch launch;
    if (!code && onnxopt_plan(&staged, &dev.limits, &launch, err)) code = ORT_INVALID_ARGUMENT;
    if (!code && launch.variant &&
        (onnxopt_cuda_launch(&dev, &launch, NULL, err) || onnxopt_cuda_synchronize(err)))
        code = ORT_EP_FAIL;
    for (int i = 0; i < d->spec->n_outputs && !code; ++i)
        if (call->out[i].data != NULL &&
            onnxopt_cuda_stage_out(call->out[i].data, device_out[i],
                                   tensor_bytes(d, &d->spec->outputs[i], &call->out[i]), err))
            code = ORT_EP_FAIL;
    for (int i = 0; i < ONNXOPT_MAX_PORTS; ++i) onnxopt_cuda_free(device_in[i]);
    for (int i = 0; i < 2; ++i) onnxopt_cuda_free(device_out[i]);
    onnxopt_cuda_leave(pushed);
    return code ? status(code, d, "%s", err) : NULL;
}

static OrtStatus *compute(void *kernel_ptr, OrtKernelContext *ctx) {
    const struct kernel *k = kernel_ptr;
    const struct op_def *d = k->op;
    OrtApiTable api = atomic_load(&g_api);
    struct onnxopt_call call;
    memset(&call, 0, sizeof call);
    call.op = d->spec;
    call.dtype = d->dtype;
    call.attrs = &k->attrs;
    size_t n_in = 0, n_out = 0;
    OrtStatus *s = ORT_CALL(api, KernelContext_GetInputCount, ctx, &n_in);
    if (s) return s;
    for (size_t i = 0; i < n_in && i < (size_t)d->spec->n_inputs; ++i) {
        const OrtValue *value = NULL;
        if ((s = ORT_CALL(api, KernelContext_GetInput, ctx, i, &value))) return s;
        if (value != NULL && (s = read_tensor(api, d, value, &call.in[i]))) return s;
    }
    for (int i = 0; i < d->spec->n_inputs; ++i)
        if (call.in[i].data == NULL && !d->spec->inputs[i].optional)
            return status(ORT_INVALID_ARGUMENT, d, "input %s is required", d->spec->inputs[i].name);
    if ((s = ORT_CALL(api, KernelContext_GetOutputCount, ctx, &n_out))) return s;
    /* every output is shaped like the first input (O like Q; Y and S like X) */
    for (size_t i = 0; i < n_out && i < (size_t)d->spec->n_outputs; ++i) {
        OrtValue *value = NULL;
        if ((s = ORT_CALL(api, KernelContext_GetOutput, ctx, i, call.in[0].dims,
                          (size_t)call.in[0].rank, &value)))
            return s;
        if (value == NULL) continue; /* an optional output the node does not use */
        void *data = NULL;
        if ((s = ORT_CALL(api, GetTensorMutableData, value, &data))) return s;
        call.out[i] = call.in[0];
        call.out[i].data = data ? data : empty_tensor;
    }
    switch (d->run) {
    case RUN_CUDA: return run_cuda(api, d, ctx, &call);
    case RUN_STAGED: return run_staged(d, &call);
    default: return run_host(d, &call);
    }
}

/* --- the ops and their domains --------------------------------------------------------------- */

#define N_DEFS (ONNXOPT_NOPS * 3)
static struct op_def defs[3][N_DEFS]; /* [RUN_HOST | RUN_CUDA | RUN_STAGED][op x dtype] */
static OrtCustomOpDomain *domains[2]; /* CPU ops run on the host | staged, with the CUDA ops */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static const char *dtype_name(int dtype) {
    return dtype == ORT_TYPE_FLOAT ? "float32" : dtype == ORT_TYPE_FLOAT16 ? "float16" : "bfloat16";
}

static void fill(struct op_def *d, const struct onnxopt_op_spec *spec, int dtype, int run) {
    memset(d, 0, sizeof *d);
    OrtCustomOp *o = &d->base;
    o->version = ONNXOPT_CUSTOM_OP_VERSION;
    o->CreateKernel = create_kernel_v1;
    o->GetName = op_name;
    o->GetExecutionProviderType = op_provider;
    o->GetInputType = input_type;
    o->GetInputTypeCount = input_count;
    o->GetOutputType = output_type;
    o->GetOutputTypeCount = output_count;
    o->KernelCompute = compute_v1;
    o->KernelDestroy = destroy_kernel;
    o->GetInputCharacteristic = input_characteristic;
    o->GetOutputCharacteristic = output_characteristic;
    o->GetInputMemoryType = memory_type;
    o->GetVariadicInputMinArity = one;
    o->GetVariadicInputHomogeneity = one;
    o->GetVariadicOutputMinArity = one;
    o->GetVariadicOutputHomogeneity = one;
    o->CreateKernelV2 = create_kernel;
    o->KernelComputeV2 = compute;
    d->spec = spec;
    d->dtype = dtype;
    d->run = run;
    snprintf(d->label, sizeof d->label, "%s::%s (%s, %s%s)", DOMAIN, spec->name,
             dtype_name(dtype), run == RUN_CUDA ? CUDA_EP : CPU_EP,
             run == RUN_STAGED ? ", staged through the GPU" : "");
}

static OrtStatus *make_domain(OrtApiTable api, int staged, OrtCustomOpDomain **out) {
    OrtStatus *s = ORT_CALL(api, CreateCustomOpDomain, DOMAIN, out);
    const int runs[2] = {staged ? RUN_STAGED : RUN_HOST, RUN_CUDA};
    for (int r = 0; r < 2 && !s; ++r)
        for (int i = 0; i < N_DEFS && !s; ++i) {
            struct op_def *d = &defs[runs[r]][i];
            if (d->spec == NULL) fill(d, &onnxopt_op_specs[i / 3], DTYPES[i % 3], runs[r]);
            s = ORT_CALL(api, CustomOpDomain_Add, *out, &d->base);
        }
    return s;
}

/* "host" (default) or "staged": what the CPU provider's ops run, from the session config. */
static OrtStatus *cpu_mode(OrtApiTable api, const OrtSessionOptions *options, int *staged) {
    int has = 0;
    *staged = 0;
    OrtStatus *s = ORT_CALL(api, HasSessionConfigEntry, options, CONFIG_KEY, &has);
    if (s || !has) return s;
    char value[16] = "";
    size_t size = sizeof value;
    if ((s = ORT_CALL(api, GetSessionConfigEntry, options, CONFIG_KEY, value, &size))) return s;
    if (strcmp(value, "staged") == 0) *staged = 1;
    else if (strcmp(value, "host") != 0)
        return status(ORT_INVALID_ARGUMENT, NULL, "session config %s is '%s'; use 'host' or "
                      "'staged'", CONFIG_KEY, value);
    return NULL;
}

ONNXOPT_EXPORT OrtStatus *RegisterCustomOps(OrtSessionOptions *options, const OrtApiBase *base) {
    OrtApiTable api = base->GetApi(ONNXOPT_ORT_API_VERSION);
    if (api == NULL) return NULL; /* ORT older than 1.16: it cannot even be told why */
    atomic_store(&g_api, api);
    int staged = 0;
    OrtStatus *s = cpu_mode(api, options, &staged);
    if (s) return s;
    pthread_mutex_lock(&lock);
    if (domains[staged] == NULL) s = make_domain(api, staged, &domains[staged]);
    OrtCustomOpDomain *domain = domains[staged];
    pthread_mutex_unlock(&lock);
    if (s) return s;
    return ORT_CALL(api, AddCustomOpDomain, options, domain);
}

/* --- for onnxopt's loader and tests ----------------------------------------------------------- */

/* The hash of the sources this build came from (a stale build is rebuilt, not used). */
ONNXOPT_EXPORT const char *onnxopt_ops_source_hash(void) { return ONNXOPT_OPS_SOURCE_HASH; }

/* "name:type,..." of parameter list `sig` (0 .. count - 1), or NULL; `name` gets its name. */
ONNXOPT_EXPORT const char *onnxopt_ops_signature(int sig, const char **name) {
    if (sig < 0 || sig >= ONNXOPT_NSIGS) return NULL;
    *name = onnxopt_sig_names[sig];
    return onnxopt_sig_layouts[sig];
}

/* The specialisation each choice takes, for the tests against the Python wrappers. */
ONNXOPT_EXPORT const char *onnxopt_ops_choose_attention(int dtype, int head, int cc, int optin,
                                                        int sms, int64_t sq, int64_t bh,
                                                        char *err) {
    const struct onnxopt_limits limits = {cc, optin, sms};
    const struct onnxopt_variant *v = onnxopt_choose_attention(dtype, head, &limits, sq, bh, err);
    return v ? v->entry : NULL;
}

ONNXOPT_EXPORT const char *onnxopt_ops_choose_norm(int dtype, int64_t hidden, int aligned,
                                                   int *threads, char *err) {
    const struct onnxopt_variant *v = onnxopt_choose_norm(dtype, hidden, aligned, threads, err);
    return v ? v->entry : NULL;
}

ONNXOPT_EXPORT const char *onnxopt_ops_choose_group_norm(int dtype, int64_t group,
                                                         int64_t spatial, int aligned,
                                                         int *threads, char *err) {
    const struct onnxopt_variant *v =
        onnxopt_choose_group_norm(dtype, group, spatial, aligned, threads, err);
    return v ? v->entry : NULL;
}

ONNXOPT_EXPORT const char *onnxopt_ops_choose_activation(const char *op, int dtype, int64_t cols,
                                                         int aligned, char *err) {
    int sig = strcmp(op, "gelu") == 0 ? ONNXOPT_SIG_ACTIVATIONS_GELU
                                      : ONNXOPT_SIG_ACTIVATIONS_SWIGLU;
    const struct onnxopt_variant *v = onnxopt_choose_activation(sig, dtype, cols, aligned, err);
    return v ? v->entry : NULL;
}

/* Round float32 values to `dtype` in place: the host's float16/bfloat16 conversions. */
ONNXOPT_EXPORT void onnxopt_ops_round(int dtype, float *values, size_t n) {
    for (size_t i = 0; i < n; ++i) values[i] = onnxopt_round(values[i], dtype);
}
