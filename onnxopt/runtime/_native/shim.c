/*
 * The native half of onnxopt's ONNX Runtime custom-op bridge.
 *
 * onnxruntime's Python wheel can only register custom ops through
 * SessionOptions.register_custom_ops_library(path), which dlopens a library and
 * calls its RegisterCustomOps. This file is that library and nothing more: it
 * forwards both pointers to a callback that the Python side installs first
 * (onnxopt/runtime/native.py), which builds the ops with ctypes.
 *
 * No ORT or Python headers: ORT types are opaque here, and the only ORT
 * function used is CreateStatus (slot 0 of the OrtApi table) to report a
 * missing callback instead of crashing.
 */
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define ONNXOPT_EXPORT __declspec(dllexport)
#else
#define ONNXOPT_EXPORT __attribute__((visibility("default")))
#endif

typedef void *(*onnxopt_register_fn)(void *options, const void *api_base);

typedef const void *(*ort_get_api_fn)(uint32_t version);
typedef struct {
  ort_get_api_fn GetApi;
  const char *(*GetVersionString)(void);
} onnxopt_api_base;

typedef void *(*ort_create_status_fn)(int code, const char *msg);

static onnxopt_register_fn g_register_callback = NULL;

/* The builder passes the sha256 prefix of this file, so a stale build is detectable. */
#ifndef ONNXOPT_SHIM_SOURCE_HASH
#define ONNXOPT_SHIM_SOURCE_HASH ""
#endif

ONNXOPT_EXPORT const char *onnxopt_shim_source_hash(void) { return ONNXOPT_SHIM_SOURCE_HASH; }

ONNXOPT_EXPORT void onnxopt_set_register_callback(void *callback) {
  g_register_callback = (onnxopt_register_fn)callback;
}

ONNXOPT_EXPORT void *RegisterCustomOps(void *options, const void *api_base) {
  onnxopt_register_fn callback = g_register_callback;
  if (callback != NULL) {
    return callback(options, api_base);
  }
  const onnxopt_api_base *base = (const onnxopt_api_base *)api_base;
  void *const *api = (void *const *)base->GetApi(16);
  if (api == NULL) {
    return NULL;
  }
  ort_create_status_fn create_status = (ort_create_status_fn)api[0];
  return create_status(1 /* ORT_FAIL */,
                       "onnxopt shim: no ops to register; create the session with "
                       "onnxopt.runtime.session() instead of loading this library directly");
}
