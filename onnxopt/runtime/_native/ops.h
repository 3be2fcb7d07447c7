/*
 * libonnxopt_ops: onnxopt's kernels as ONNX Runtime custom ops (domain ai.onnxopt.cuda).
 *
 * One op call goes through three steps, whatever runs it:
 *
 *   1. ops_main.c reads the node's tensors from ORT (pointers and shapes) and its attributes
 *      (read once, when ORT creates the kernel);
 *   2. ops_plan.c checks the shapes, chooses the specialisation and the launch geometry (grid,
 *      block, shared memory) from the device's limits, and packs the kernel's arguments into the
 *      array cuLaunchKernel takes, with the packing generated from kernels/<family>.json;
 *   3. a launcher runs that launch: ops_cuda.c on the GPU (ORT's CUDA provider, on its compute
 *      stream; or the CPU provider staging through device memory), ops_host.c on the CPU (the
 *      same contract as the CUDA kernel, reading the same argument array, block by block over
 *      the same grid).
 *
 * So the CPU path, which CI runs, exercises everything but the device code itself.
 */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define ONNXOPT_MAX_RANK 8
#define ONNXOPT_MAX_PORTS 8
#define ONNXOPT_MAX_ARGS 24
#define ONNXOPT_MAX_ATTRS 4
#define ONNXOPT_ERR 512

enum { ONNXOPT_ATTR_FLOAT = 1, ONNXOPT_ATTR_INT = 2, ONNXOPT_ATTR_STRING = 3 };

/* One specialisation of a kernel family (a row of its JSON "variants"). */
struct onnxopt_variant {
    const char *entry;
    int family;
    int sig;   /* which parameter list (ONNXOPT_SIG_*) */
    int dtype; /* ORT element type */
    int kind;  /* attention: 1 tensor cores, 2 CUDA cores */
    int dmax, bm, bn, warps, vec, maxit;
    int smem;   /* dynamic shared memory per block, bytes */
    int min_cc; /* 80 for 8.0 */
};

struct onnxopt_port {
    const char *name;
    int optional;
    int type; /* 0: the op's T; else a fixed ORT element type */
};

struct onnxopt_attr_spec {
    const char *name;
    int kind;
    int required;
    double number; /* default of a float or int attribute */
    const char *text;
};

struct onnxopt_op_spec {
    const char *name;
    int family;
    int n_inputs;
    struct onnxopt_port inputs[ONNXOPT_MAX_PORTS];
    int n_outputs;
    struct onnxopt_port outputs[2];
    int n_attrs;
    struct onnxopt_attr_spec attrs[ONNXOPT_MAX_ATTRS];
};

/* Each translation unit reads only some of the generated tables. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-const-variable"
#include "onnxopt_ops_gen.h"
#pragma GCC diagnostic pop

/* What a tile or vector choice reads of a device. */
struct onnxopt_limits {
    int cc;         /* compute capability as 10 * major + minor */
    int smem_optin; /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    int sm_count;   /* 0: unknown (the host) */
};

struct onnxopt_tensor {
    void *data; /* NULL: an absent optional port */
    int rank;
    int64_t dims[ONNXOPT_MAX_RANK];
};

/* A kernel's attribute values, by the index of the attribute in its op spec. */
struct onnxopt_attrs {
    double number[ONNXOPT_MAX_ATTRS];
    char text[ONNXOPT_MAX_ATTRS][32];
};

/* One op call as the plan sees it. */
struct onnxopt_call {
    const struct onnxopt_op_spec *op;
    int dtype;
    const struct onnxopt_attrs *attrs;
    struct onnxopt_tensor in[ONNXOPT_MAX_PORTS];
    struct onnxopt_tensor out[2];
};

/* One kernel launch: what cuLaunchKernel takes. `args` points into `storage`. */
struct onnxopt_launch {
    const struct onnxopt_variant *variant; /* NULL: nothing to launch (an empty tensor) */
    unsigned grid[3], block[3];
    unsigned smem;
    void *args[ONNXOPT_MAX_ARGS];
    union {
        struct onnxopt_flash_attention_args fa;
        struct onnxopt_layer_norm_args ln;
        struct onnxopt_group_norm_args gn;
        struct onnxopt_activations_gelu_args gelu;
        struct onnxopt_activations_swiglu_args swiglu;
    } storage;
};

/* ops_plan.c: output shapes (from the inputs) and the launch, or an error message. */
int onnxopt_output_shapes(const struct onnxopt_call *call, char *err);
int onnxopt_plan(const struct onnxopt_call *call, const struct onnxopt_limits *limits,
                 struct onnxopt_launch *launch, char *err);
int onnxopt_elem_bytes(int dtype);
/* Write a message into ``err`` (ONNXOPT_ERR bytes) and return -1: every failure's one line. */
int onnxopt_fail(char *err, const char *fmt, ...);
const struct onnxopt_variant *onnxopt_find_variant(const char *entry);

/* The choices, exported for the tests that hold them to the Python launch wrappers'. */
const struct onnxopt_variant *onnxopt_choose_attention(int dtype, int head,
                                                       const struct onnxopt_limits *limits,
                                                       int64_t sq, int64_t batch_heads,
                                                       char *err);
const struct onnxopt_variant *onnxopt_choose_norm(int dtype, int64_t hidden, int aligned,
                                                  int *threads, char *err);
const struct onnxopt_variant *onnxopt_choose_group_norm(int dtype, int64_t group,
                                                        int64_t spatial, int aligned,
                                                        int *threads, char *err);
const struct onnxopt_variant *onnxopt_choose_activation(int sig, int dtype, int64_t cols,
                                                        int aligned, char *err);

/* ops_host.c: run a launch on the CPU; 0 or -1 with `err` set. */
int onnxopt_host_run(const struct onnxopt_variant *v, const unsigned grid[3],
                     const unsigned block[3], void *const *args, char *err);

/* ops_cuda.c */
struct onnxopt_device {
    void *context;
    struct onnxopt_limits limits;
};
int onnxopt_cuda_enter(struct onnxopt_device *dev, int *pushed, char *err);
void onnxopt_cuda_leave(int pushed);
int onnxopt_cuda_launch(const struct onnxopt_device *dev, const struct onnxopt_launch *launch,
                        void *stream, char *err);
int onnxopt_cuda_stage_in(const void *host, size_t bytes, uint64_t *device, char *err);
int onnxopt_cuda_alloc(size_t bytes, uint64_t *device, char *err);
int onnxopt_cuda_stage_out(void *host, uint64_t device, size_t bytes, char *err);
int onnxopt_cuda_synchronize(char *err);
void onnxopt_cuda_free(uint64_t device);

#if defined(_WIN32)
#define ONNXOPT_EXPORT __declspec(dllexport)
#else
#define ONNXOPT_EXPORT __attribute__((visibility("default")))
#endif
