/*
 * The CUDA driver API, opened at first use with dlopen: building and loading the library needs
 * no toolkit and no driver; a machine without one gets an error status on the first CUDA
 * launch, naming what is missing.
 *
 * Kernels come from the images `onnxopt kernels --build` makes (SASS for sm_80/86/89/90, PTX
 * for compute_90), found in $ONNXOPT_KERNEL_IMAGES (folders separated by ':'), else beside the
 * library (onnxopt_kernels/), else where the onnxopt package keeps them (an installed wheel's
 * onnxopt/kernels/bin, a source checkout's kernels/bin). An image is used only if the folder's
 * manifest records the digest of the source this library was built with. A device loads SASS
 * of its major version (the nearest lower minor), else the newest PTX not newer than itself,
 * as onnxopt/runtime/cuda/images.py chooses.
 *
 * $ONNXOPT_LIBCUDA names another driver library: the tests point it at a fake one.
 */
#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "ops.h"

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

enum {
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

/* The driver's entry points, by their exported (versioned) names. */
static struct {
    CUresult (*Init)(unsigned);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxGetDevice)(CUdevice *);
    CUresult (*CtxPushCurrent)(CUcontext);
    CUresult (*CtxPopCurrent)(CUcontext *);
    CUresult (*CtxSynchronize)(void);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*FuncSetAttribute)(CUfunction, int, int);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
} cu;

static const struct {
    const char *name;
    size_t offset;
} SYMBOLS[] = {
#define SYM(field, name) {name, offsetof(__typeof__(cu), field)}
    SYM(Init, "cuInit"),
    SYM(GetErrorName, "cuGetErrorName"),
    SYM(DeviceGet, "cuDeviceGet"),
    SYM(DeviceGetAttribute, "cuDeviceGetAttribute"),
    SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
    SYM(CtxGetCurrent, "cuCtxGetCurrent"),
    SYM(CtxGetDevice, "cuCtxGetDevice"),
    SYM(CtxPushCurrent, "cuCtxPushCurrent_v2"),
    SYM(CtxPopCurrent, "cuCtxPopCurrent_v2"),
    SYM(CtxSynchronize, "cuCtxSynchronize"),
    SYM(ModuleLoadData, "cuModuleLoadData"),
    SYM(ModuleGetFunction, "cuModuleGetFunction"),
    SYM(FuncSetAttribute, "cuFuncSetAttribute"),
    SYM(LaunchKernel, "cuLaunchKernel"),
    SYM(MemAlloc, "cuMemAlloc_v2"),
    SYM(MemFree, "cuMemFree_v2"),
    SYM(MemcpyHtoD, "cuMemcpyHtoD_v2"),
    SYM(MemcpyDtoH, "cuMemcpyDtoH_v2"),
#undef SYM
};

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[ONNXOPT_ERR];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void load_driver(void) {
    const char *name = getenv("ONNXOPT_LIBCUDA");
    if (name == NULL || *name == '\0') name = "libcuda.so.1";
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        snprintf(load_error, sizeof load_error,
                 "the CUDA driver library (%s) cannot be loaded: no NVIDIA driver here? (%s)",
                 name, dlerror());
        return;
    }
    for (size_t i = 0; i < sizeof SYMBOLS / sizeof SYMBOLS[0]; ++i) {
        void *fn = dlsym(lib, SYMBOLS[i].name);
        if (fn == NULL) {
            snprintf(load_error, sizeof load_error, "the CUDA driver library %s has no %s", name,
                     SYMBOLS[i].name);
            return;
        }
        memcpy((char *)&cu + SYMBOLS[i].offset, &fn, sizeof fn);
    }
    CUresult rc = cu.Init(0);
    if (rc != 0) {
        const char *what = NULL;
        cu.GetErrorName(rc, &what);
        snprintf(load_error, sizeof load_error, "the CUDA driver cannot be initialised (%s)",
                 what ? what : "unknown error");
    }
}

static int check(CUresult rc, const char *call, char *err) {
    if (rc == 0) return 0;
    const char *what = NULL;
    if (cu.GetErrorName == NULL || cu.GetErrorName(rc, &what) != 0) what = NULL;
    return onnxopt_fail(err, "%s failed: %s (%d)", call, what ? what : "unknown error", rc);
}

static int driver(char *err) {
    pthread_once(&load_once, load_driver);
    if (load_error[0]) return onnxopt_fail(err, "%s", load_error);
    return 0;
}

/* --- contexts and device limits --------------------------------------------------------------- */

#define MAX_DEVICES 64
static CUcontext primary[MAX_DEVICES];
static struct onnxopt_limits device_limits[MAX_DEVICES];
static int limits_known[MAX_DEVICES];

static int default_ordinal(void) {
    const char *env = getenv("ONNXOPT_CUDA_DEVICE");
    return env && *env ? atoi(env) : 0;
}

static int read_limits(CUdevice dev, struct onnxopt_limits *out, char *err) {
    int major = 0, minor = 0, optin = 0, sms = 0;
    if (check(cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
              "cuDeviceGetAttribute", err) ||
        check(cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
              "cuDeviceGetAttribute", err) ||
        check(cu.DeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                    dev),
              "cuDeviceGetAttribute", err) ||
        check(cu.DeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
              "cuDeviceGetAttribute", err))
        return -1;
    out->cc = major * 10 + minor;
    out->smem_optin = optin;
    out->sm_count = sms;
    return 0;
}

/*
 * Make a context current for this call: ORT's CUDA provider has made its own (the device's
 * primary context) current in the thread that calls the kernel; the CPU provider's staging has
 * none, so the primary context of $ONNXOPT_CUDA_DEVICE (default 0) is pushed, and popped again
 * by onnxopt_cuda_leave. Fills the context and the device's limits.
 */
int onnxopt_cuda_enter(struct onnxopt_device *dev, int *pushed, char *err) {
    *pushed = 0;
    if (driver(err)) return -1;
    CUcontext ctx = NULL;
    if (check(cu.CtxGetCurrent(&ctx), "cuCtxGetCurrent", err)) return -1;
    if (ctx == NULL) {
        int ordinal = default_ordinal();
        if (ordinal < 0 || ordinal >= MAX_DEVICES)
            return onnxopt_fail(err, "ONNXOPT_CUDA_DEVICE=%d is not a device ordinal", ordinal);
        pthread_mutex_lock(&lock);
        int rc = 0;
        if (primary[ordinal] == NULL) {
            CUdevice d;
            rc = check(cu.DeviceGet(&d, ordinal), "cuDeviceGet", err) ||
                 check(cu.DevicePrimaryCtxRetain(&primary[ordinal], d),
                       "cuDevicePrimaryCtxRetain", err);
        }
        ctx = primary[ordinal];
        pthread_mutex_unlock(&lock);
        if (rc) return -1;
        if (check(cu.CtxPushCurrent(ctx), "cuCtxPushCurrent", err)) return -1;
        *pushed = 1;
    }
    CUdevice d = 0;
    if (check(cu.CtxGetDevice(&d), "cuCtxGetDevice", err)) goto undo;
    if (d < 0 || d >= MAX_DEVICES) {
        onnxopt_fail(err, "device %d is beyond the %d this library tracks", d, MAX_DEVICES);
        goto undo;
    }
    pthread_mutex_lock(&lock);
    int rc = 0;
    if (!limits_known[d]) {
        rc = read_limits(d, &device_limits[d], err);
        limits_known[d] = rc == 0;
    }
    dev->limits = device_limits[d];
    pthread_mutex_unlock(&lock);
    if (rc) goto undo;
    dev->context = ctx;
    return 0;
undo:
    onnxopt_cuda_leave(*pushed);
    *pushed = 0;
    return -1;
}

void onnxopt_cuda_leave(int pushed) {
    if (pushed) {
        CUcontext popped;
        cu.CtxPopCurrent(&popped);
    }
}

/* --- images ----------------------------------------------------------------------------------- */

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    char *data = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)n + 1)) != NULL) {
            if (fread(data, 1, (size_t)n, f) != (size_t)n) {
                free(data);
                data = NULL;
            } else {
                data[n] = '\0'; /* PTX is read as a C string */
                *size = (size_t)n;
            }
        }
    }
    fclose(f);
    return data;
}

static int target_version(const char *target) { /* "sm_86" -> 86, "compute_90" -> 90 */
    const char *u = strchr(target, '_');
    return u ? atoi(u + 1) : 0;
}

/* The target a device of capability cc loads among those present in `dir`, or NULL. */
static const char *choose_target(const char *dir, int family, int cc, char *path, size_t size) {
    char manifest_path[PATH_MAX];
    snprintf(manifest_path, sizeof manifest_path, "%s/%s", dir, ONNXOPT_MANIFEST);
    size_t n = 0;
    char *manifest = read_file(manifest_path, &n);
    if (manifest == NULL) return NULL;
    /* built from the source this library was built with: its digest is in the manifest */
    int current = strstr(manifest, onnxopt_family_digests[family]) != NULL;
    free(manifest);
    if (!current) return NULL;
    const char *best = NULL;
    int best_is_sass = 0, best_version = -1;
    for (int i = 0; i < ONNXOPT_NTARGETS; ++i) {
        const char *t = onnxopt_targets[i];
        int sass = strncmp(t, "sm_", 3) == 0, version = target_version(t);
        if (version > cc) continue;
        if (sass && version / 10 != cc / 10) continue; /* SASS runs only within its major */
        char candidate[PATH_MAX];
        snprintf(candidate, sizeof candidate, "%s/%s.%s.%s", dir, onnxopt_family_names[family],
                 t, sass ? "cubin" : "ptx");
        if (!file_exists(candidate)) continue;
        if (best == NULL || (sass && !best_is_sass) ||
            (sass == best_is_sass && version > best_version)) {
            best = t;
            best_is_sass = sass;
            best_version = version;
            snprintf(path, size, "%s", candidate);
        }
    }
    return best;
}

static void library_dir(char *out, size_t size) {
    Dl_info info;
    out[0] = '\0';
    if (dladdr((void *)&library_dir, &info) && info.dli_fname) {
        char copy[PATH_MAX];
        snprintf(copy, sizeof copy, "%s", info.dli_fname);
        snprintf(out, size, "%s", dirname(copy));
    }
}

static int find_image(int family, int cc, char *path, size_t size, char *searched, char *err) {
    char dirs[8][PATH_MAX];
    int n = 0;
    const char *env = getenv("ONNXOPT_KERNEL_IMAGES");
    if (env != NULL) {
        char copy[4 * PATH_MAX];
        snprintf(copy, sizeof copy, "%s", env);
        for (char *save = NULL, *tok = strtok_r(copy, ":", &save); tok && n < 4;
             tok = strtok_r(NULL, ":", &save))
            snprintf(dirs[n++], PATH_MAX, "%s", tok);
    }
    char here[PATH_MAX];
    library_dir(here, sizeof here);
    if (here[0]) {
        static const char *const rel[] = {"onnxopt_kernels", "../../kernels/bin",
                                          "../../../kernels/bin"};
        for (int i = 0; i < 3; ++i) snprintf(dirs[n++], PATH_MAX, "%s/%s", here, rel[i]);
    }
    size_t used = 0;
    searched[0] = '\0';
    for (int i = 0; i < n; ++i) {
        if (choose_target(dirs[i], family, cc, path, size) != NULL) return 0;
        char resolved[PATH_MAX];
        const char *shown = realpath(dirs[i], resolved) ? resolved : dirs[i];
        if (used < ONNXOPT_ERR / 2)
            used += (size_t)snprintf(searched + used, ONNXOPT_ERR / 2 - used, "%s%s",
                                     used ? ", " : "", shown);
    }
    return onnxopt_fail(err, "no kernel image of %s for compute capability %d.%d (searched %s); build "
                     "them with `onnxopt kernels --build` and put them beside the library in "
                     "onnxopt_kernels/, or name their folder in ONNXOPT_KERNEL_IMAGES",
                onnxopt_family_names[family], cc / 10, cc % 10, searched);
}

/* --- modules and functions, per context ------------------------------------------------------ */

#define MAX_MODULES 64
#define MAX_FUNCTIONS 512
static struct {
    CUcontext ctx;
    int family;
    CUmodule module;
} modules[MAX_MODULES];
static int n_modules;
static struct {
    CUcontext ctx;
    const struct onnxopt_variant *variant;
    CUfunction fn;
} functions[MAX_FUNCTIONS];
static int n_functions;

static int load_module(const struct onnxopt_device *dev, int family, CUmodule *out, char *err) {
    for (int i = 0; i < n_modules; ++i)
        if (modules[i].ctx == dev->context && modules[i].family == family) {
            *out = modules[i].module;
            return 0;
        }
    if (n_modules == MAX_MODULES) return onnxopt_fail(err, "too many CUDA modules loaded");
    char path[PATH_MAX], searched[ONNXOPT_ERR];
    if (find_image(family, dev->limits.cc, path, sizeof path, searched, err)) return -1;
    size_t size = 0;
    char *image = read_file(path, &size);
    if (image == NULL) return onnxopt_fail(err, "cannot read %s: %s", path, strerror(errno));
    CUmodule module = NULL;
    int rc = check(cu.ModuleLoadData(&module, image), "cuModuleLoadData", err);
    free(image);
    if (rc) {
        size_t used = strlen(err);
        snprintf(err + used, ONNXOPT_ERR - used, " (%s)", path);
        return -1;
    }
    modules[n_modules].ctx = dev->context;
    modules[n_modules].family = family;
    modules[n_modules].module = module;
    ++n_modules;
    *out = module;
    return 0;
}

static int get_function(const struct onnxopt_device *dev, const struct onnxopt_variant *v,
                        CUfunction *out, char *err) {
    pthread_mutex_lock(&lock);
    int rc = 0;
    for (int i = 0; i < n_functions; ++i)
        if (functions[i].ctx == dev->context && functions[i].variant == v) {
            *out = functions[i].fn;
            goto done;
        }
    if (dev->limits.cc < v->min_cc) {
        rc = onnxopt_fail(err, "%s needs compute capability %d.%d, the device has %d.%d", v->entry,
                  v->min_cc / 10, v->min_cc % 10, dev->limits.cc / 10, dev->limits.cc % 10);
        goto done;
    }
    if (v->smem > dev->limits.smem_optin) {
        rc = onnxopt_fail(err, "%s needs %d bytes of shared memory per block, the device allows %d",
                  v->entry, v->smem, dev->limits.smem_optin);
        goto done;
    }
    if (n_functions == MAX_FUNCTIONS) {
        rc = onnxopt_fail(err, "too many CUDA functions loaded");
        goto done;
    }
    CUmodule module;
    if ((rc = load_module(dev, v->family, &module, err))) goto done;
    CUfunction fn = NULL;
    if ((rc = check(cu.ModuleGetFunction(&fn, module, v->entry), "cuModuleGetFunction", err)))
        goto done;
    if (v->smem > ONNXOPT_DEFAULT_SMEM_LIMIT &&
        (rc = check(cu.FuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        v->smem),
                    "cuFuncSetAttribute", err)))
        goto done;
    functions[n_functions].ctx = dev->context;
    functions[n_functions].variant = v;
    functions[n_functions].fn = fn;
    ++n_functions;
    *out = fn;
done:
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Enqueue the launch on `stream` (ORT's compute stream, or the null stream when staging). */
int onnxopt_cuda_launch(const struct onnxopt_device *dev, const struct onnxopt_launch *l,
                        void *stream, char *err) {
    CUfunction fn = NULL;
    if (get_function(dev, l->variant, &fn, err)) return -1;
    return check(cu.LaunchKernel(fn, l->grid[0], l->grid[1], l->grid[2], l->block[0],
                                 l->block[1], l->block[2], l->smem, stream, (void **)l->args,
                                 NULL),
                 "cuLaunchKernel", err);
}

/* --- staging: the CPU provider's tensors through device memory ------------------------------- */

int onnxopt_cuda_alloc(size_t bytes, uint64_t *device, char *err) {
    CUdeviceptr p = 0;
    if (check(cu.MemAlloc(&p, bytes ? bytes : 1), "cuMemAlloc", err)) return -1;
    *device = (uint64_t)p;
    return 0;
}

int onnxopt_cuda_stage_in(const void *host, size_t bytes, uint64_t *device, char *err) {
    if (onnxopt_cuda_alloc(bytes, device, err)) return -1;
    if (bytes && check(cu.MemcpyHtoD((CUdeviceptr)*device, host, bytes), "cuMemcpyHtoD", err)) {
        onnxopt_cuda_free(*device);
        *device = 0;
        return -1;
    }
    return 0;
}

int onnxopt_cuda_stage_out(void *host, uint64_t device, size_t bytes, char *err) {
    if (bytes == 0) return 0;
    return check(cu.MemcpyDtoH(host, (CUdeviceptr)device, bytes), "cuMemcpyDtoH", err);
}

int onnxopt_cuda_synchronize(char *err) {
    return check(cu.CtxSynchronize(), "cuCtxSynchronize", err);
}

void onnxopt_cuda_free(uint64_t device) {
    if (device) cu.MemFree((CUdeviceptr)device);
}
