/*
 * The part of ONNX Runtime's C ABI that libonnxopt_ops uses, declared here rather than vendored.
 *
 * ORT's C API is a table of function pointers (OrtApi) that is append-only across versions:
 * a slot index plus a signature is a stable contract. The slots below were counted in
 * include/onnxruntime/core/session/onnxruntime_c_api.h (ORT 1.31; KernelContext_GetGPUComputeStream
 * at 193 and the others agree with the offsetof() asserts in onnxruntime_c_api.cc). Every
 * function used here exists in API version 16 (ORT 1.16), which is the version asked for,
 * so any ORT from 1.16 on loads the library.
 *
 * OrtCustomOp is laid out up to its version-16 members (the status-returning V2 callbacks);
 * the version field claims exactly that, so ORT never reads past what is filled.
 */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define ONNXOPT_ORT_API_VERSION 16

typedef struct OrtStatus OrtStatus;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtCustomOpDomain OrtCustomOpDomain;
typedef struct OrtKernelInfo OrtKernelInfo;
typedef struct OrtKernelContext OrtKernelContext;
typedef struct OrtValue OrtValue;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
typedef void *const *OrtApiTable; /* const OrtApi*: read by slot */

typedef struct OrtApiBase {
    OrtApiTable (*GetApi)(uint32_t version);
    const char *(*GetVersionString)(void);
} OrtApiBase;

/* OrtErrorCode */
enum { ORT_OK = 0, ORT_FAIL = 1, ORT_INVALID_ARGUMENT = 2, ORT_NOT_IMPLEMENTED = 9,
       ORT_RUNTIME_EXCEPTION = 6, ORT_EP_FAIL = 11 };

/* ONNXTensorElementDataType */
enum { ORT_TYPE_UNDEFINED = 0, ORT_TYPE_FLOAT = 1, ORT_TYPE_INT32 = 6, ORT_TYPE_FLOAT16 = 10,
       ORT_TYPE_BFLOAT16 = 16 };

/* OrtCustomOpInputOutputCharacteristic, OrtMemType */
enum { ORT_REQUIRED = 0, ORT_OPTIONAL = 1 };
enum { ORT_MEM_DEFAULT = 0 };

/* Slots of the OrtApi table. */
enum {
    ORT_SLOT_CreateStatus = 0,
    ORT_SLOT_GetErrorCode = 1,
    ORT_SLOT_GetErrorMessage = 2,
    ORT_SLOT_CreateCustomOpDomain = 26,
    ORT_SLOT_CustomOpDomain_Add = 27,
    ORT_SLOT_AddCustomOpDomain = 28,
    ORT_SLOT_GetTensorMutableData = 51,
    ORT_SLOT_GetTensorElementType = 60,
    ORT_SLOT_GetDimensionsCount = 61,
    ORT_SLOT_GetDimensions = 62,
    ORT_SLOT_GetTensorTypeAndShape = 65,
    ORT_SLOT_KernelInfoGetAttribute_float = 85,
    ORT_SLOT_KernelInfoGetAttribute_int64 = 86,
    ORT_SLOT_KernelInfoGetAttribute_string = 87,
    ORT_SLOT_KernelContext_GetInputCount = 88,
    ORT_SLOT_KernelContext_GetOutputCount = 89,
    ORT_SLOT_KernelContext_GetInput = 90,
    ORT_SLOT_KernelContext_GetOutput = 91,
    ORT_SLOT_ReleaseStatus = 93,
    ORT_SLOT_ReleaseTensorTypeAndShapeInfo = 99,
    ORT_SLOT_KernelContext_GetGPUComputeStream = 193,
    ORT_SLOT_HasSessionConfigEntry = 237,
    ORT_SLOT_GetSessionConfigEntry = 238,
};

typedef OrtStatus *(*ort_CreateStatus)(int code, const char *msg);
typedef int (*ort_GetErrorCode)(const OrtStatus *);
typedef const char *(*ort_GetErrorMessage)(const OrtStatus *);
typedef void (*ort_ReleaseStatus)(OrtStatus *);
typedef OrtStatus *(*ort_CreateCustomOpDomain)(const char *, OrtCustomOpDomain **);
typedef OrtStatus *(*ort_CustomOpDomain_Add)(OrtCustomOpDomain *, const void *op);
typedef OrtStatus *(*ort_AddCustomOpDomain)(OrtSessionOptions *, OrtCustomOpDomain *);
typedef OrtStatus *(*ort_GetTensorMutableData)(OrtValue *, void **);
typedef OrtStatus *(*ort_GetTensorElementType)(const OrtTensorTypeAndShapeInfo *, int *);
typedef OrtStatus *(*ort_GetDimensionsCount)(const OrtTensorTypeAndShapeInfo *, size_t *);
typedef OrtStatus *(*ort_GetDimensions)(const OrtTensorTypeAndShapeInfo *, int64_t *, size_t);
typedef OrtStatus *(*ort_GetTensorTypeAndShape)(const OrtValue *, OrtTensorTypeAndShapeInfo **);
typedef void (*ort_ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo *);
typedef OrtStatus *(*ort_KernelInfoGetAttribute_float)(const OrtKernelInfo *, const char *,
                                                       float *);
typedef OrtStatus *(*ort_KernelInfoGetAttribute_int64)(const OrtKernelInfo *, const char *,
                                                       int64_t *);
typedef OrtStatus *(*ort_KernelInfoGetAttribute_string)(const OrtKernelInfo *, const char *,
                                                        char *, size_t *);
typedef OrtStatus *(*ort_KernelContext_GetInputCount)(const OrtKernelContext *, size_t *);
typedef OrtStatus *(*ort_KernelContext_GetOutputCount)(const OrtKernelContext *, size_t *);
typedef OrtStatus *(*ort_KernelContext_GetInput)(const OrtKernelContext *, size_t,
                                                 const OrtValue **);
typedef OrtStatus *(*ort_KernelContext_GetOutput)(OrtKernelContext *, size_t, const int64_t *,
                                                  size_t, OrtValue **);
typedef OrtStatus *(*ort_KernelContext_GetGPUComputeStream)(const OrtKernelContext *, void **);
typedef OrtStatus *(*ort_HasSessionConfigEntry)(const OrtSessionOptions *, const char *, int *);
typedef OrtStatus *(*ort_GetSessionConfigEntry)(const OrtSessionOptions *, const char *, char *,
                                                size_t *);

/* ORT_CALL(api, Name, args...): call slot ORT_SLOT_Name of the table with its signature. */
#define ORT_CALL(api, name, ...) (((ort_##name)(api)[ORT_SLOT_##name])(__VA_ARGS__))

typedef struct OrtCustomOp OrtCustomOp;
struct OrtCustomOp {
    uint32_t version;
    void *(*CreateKernel)(const OrtCustomOp *op, OrtApiTable api, const OrtKernelInfo *info);
    const char *(*GetName)(const OrtCustomOp *op);
    const char *(*GetExecutionProviderType)(const OrtCustomOp *op);
    int (*GetInputType)(const OrtCustomOp *op, size_t index);
    size_t (*GetInputTypeCount)(const OrtCustomOp *op);
    int (*GetOutputType)(const OrtCustomOp *op, size_t index);
    size_t (*GetOutputTypeCount)(const OrtCustomOp *op);
    void (*KernelCompute)(void *kernel, OrtKernelContext *context);
    void (*KernelDestroy)(void *kernel);
    int (*GetInputCharacteristic)(const OrtCustomOp *op, size_t index); /* version 8 */
    int (*GetOutputCharacteristic)(const OrtCustomOp *op, size_t index);
    int (*GetInputMemoryType)(const OrtCustomOp *op, size_t index); /* version 13 */
    int (*GetVariadicInputMinArity)(const OrtCustomOp *op);          /* version 14 */
    int (*GetVariadicInputHomogeneity)(const OrtCustomOp *op);
    int (*GetVariadicOutputMinArity)(const OrtCustomOp *op);
    int (*GetVariadicOutputHomogeneity)(const OrtCustomOp *op);
    OrtStatus *(*CreateKernelV2)(const OrtCustomOp *op, OrtApiTable api,
                                 const OrtKernelInfo *info, void **kernel); /* version 16 */
    OrtStatus *(*KernelComputeV2)(void *kernel, OrtKernelContext *context);
};
#define ONNXOPT_CUSTOM_OP_VERSION 16
