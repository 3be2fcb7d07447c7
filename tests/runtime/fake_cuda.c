/*
 * A fake CUDA driver (libcuda.so.1) for testing libonnxopt_ops' CUDA path on a machine without a
 * GPU: tests/runtime/test_native_cuda_path.py builds it and points ONNXOPT_LIBCUDA at it.
 *
 * "Device memory" is host memory, a module is the image file's text, a function its entry name.
 * cuLaunchKernel records the launch in $FAKE_CUDA_LOG and runs it with the library's own host
 * implementation (onnxopt_ops_host_launch, looked up in the already loaded library named by
 * $FAKE_CUDA_OPS), so a staged session computes real answers through the driver path: context,
 * image choice, module and function lookup, shared-memory opt-in, copies, launch geometry and
 * the packed argument array.
 *
 * The device: compute capability $FAKE_CUDA_CC ("86"), $FAKE_CUDA_SMEM_OPTIN bytes of opt-in
 * shared memory (101376), $FAKE_CUDA_SMS multiprocessors (84). $FAKE_CUDA_DEVICES=0: none.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
enum { OK = 0, INVALID_VALUE = 1, NOT_INITIALIZED = 3, NO_DEVICE = 100, INVALID_CONTEXT = 201,
       NOT_FOUND = 500 };

static int initialised;
static __thread void *stack[16];
static __thread int depth;
static int primary_retained;
static char primary_context[1];

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

static void log_line(const char *fmt, ...) {
    const char *path = getenv("FAKE_CUDA_LOG");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    __builtin_va_list ap;
    __builtin_va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    __builtin_va_end(ap);
    fputc('\n', f);
    fclose(f);
}

CUresult cuInit(unsigned flags) {
    initialised = 1;
    return env_int("FAKE_CUDA_DEVICES", 1) > 0 ? OK : NO_DEVICE;
}

CUresult cuGetErrorName(CUresult rc, const char **name) {
    *name = rc == NO_DEVICE ? "CUDA_ERROR_NO_DEVICE"
            : rc == NOT_FOUND ? "CUDA_ERROR_NOT_FOUND"
            : rc == INVALID_CONTEXT ? "CUDA_ERROR_INVALID_CONTEXT"
                                     : "CUDA_ERROR_INVALID_VALUE";
    return OK;
}

CUresult cuDeviceGet(int *dev, int ordinal) {
    if (ordinal >= env_int("FAKE_CUDA_DEVICES", 1)) return INVALID_VALUE;
    *dev = ordinal;
    return OK;
}

CUresult cuDeviceGetAttribute(int *value, int attribute, int dev) {
    int cc = env_int("FAKE_CUDA_CC", 86);
    switch (attribute) {
    case 75: *value = cc / 10; break;
    case 76: *value = cc % 10; break;
    case 97: *value = env_int("FAKE_CUDA_SMEM_OPTIN", 101376); break;
    case 16: *value = env_int("FAKE_CUDA_SMS", 84); break;
    default: return INVALID_VALUE;
    }
    return OK;
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    primary_retained++;
    log_line("retain %d", dev);
    *ctx = primary_context;
    return OK;
}

CUresult cuCtxGetCurrent(void **ctx) {
    if (!initialised) return NOT_INITIALIZED;
    *ctx = depth ? stack[depth - 1] : NULL;
    return OK;
}

CUresult cuCtxGetDevice(int *dev) {
    if (!depth) return INVALID_CONTEXT;
    *dev = 0;
    return OK;
}

CUresult cuCtxPushCurrent_v2(void *ctx) {
    stack[depth++] = ctx;
    log_line("push");
    return OK;
}

CUresult cuCtxPopCurrent_v2(void **ctx) {
    if (!depth) return INVALID_CONTEXT;
    *ctx = stack[--depth];
    log_line("pop");
    return OK;
}

CUresult cuCtxSynchronize(void) { return depth ? OK : INVALID_CONTEXT; }

CUresult cuModuleLoadData(void **module, const void *image) {
    if (!depth) return INVALID_CONTEXT;
    log_line("module %s", (const char *)image);
    *module = strdup((const char *)image);
    return OK;
}

CUresult cuModuleGetFunction(void **fn, void *module, const char *name) {
    if (!strstr((const char *)module, "FAKE")) return NOT_FOUND;
    *fn = strdup(name);
    return OK;
}

CUresult cuFuncSetAttribute(void *fn, int attribute, int value) {
    log_line("smem %s %d", (const char *)fn, value);
    return OK;
}

CUresult cuMemAlloc_v2(unsigned long long *ptr, size_t bytes) {
    if (!depth) return INVALID_CONTEXT;
    void *p = NULL;
    if (posix_memalign(&p, 256, bytes)) return INVALID_VALUE;
    *ptr = (unsigned long long)(size_t)p;
    return OK;
}

CUresult cuMemFree_v2(unsigned long long ptr) {
    free((void *)(size_t)ptr);
    return OK;
}

CUresult cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t bytes) {
    memcpy((void *)(size_t)dst, src, bytes);
    return OK;
}

CUresult cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t bytes) {
    memcpy(dst, (const void *)(size_t)src, bytes);
    return OK;
}

typedef int (*host_launch_fn)(const char *, const unsigned *, const unsigned *, void **, char *);

CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, void *stream, void **args, void **extra) {
    if (!depth) return INVALID_CONTEXT;
    const char *entry = fn;
    log_line("launch %s grid=%u,%u,%u block=%u,%u,%u smem=%u stream=%p", entry, gx, gy, gz, bx,
             by, bz, smem, stream);
    const char *ops = getenv("FAKE_CUDA_OPS");
    void *lib = ops ? dlopen(ops, RTLD_NOW | RTLD_NOLOAD) : NULL;
    host_launch_fn run = lib ? (host_launch_fn)dlsym(lib, "onnxopt_ops_host_launch") : NULL;
    if (run == NULL) return NOT_FOUND;
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    char err[512] = "";
    if (run(entry, grid, block, args, err)) {
        log_line("error %s", err);
        return INVALID_VALUE;
    }
    return OK;
}
