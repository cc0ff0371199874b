// FlashCore C ABI: the one entry point the Python API (ctypes) and the standalone driver call.
//
// Layout (as FlashAttention): q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D], o [B, Sq, Hq, D],
// lse [B, Hq, Sq] float32 contiguous. Strides are in elements; the last dim (D) must be contiguous.
// GQA: query head h reads K/V head h / (Hq / Hkv). Causal masking is aligned bottom-right:
// query row i sees key j iff j <= i + (Sk - Sq). A row that sees no key gets O = 0 and LSE = -inf.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum fc_dtype { FC_FP16 = 0, FC_BF16 = 1 };

enum fc_status {
  FC_OK = 0,
  FC_ERR_INVALID_ARGUMENT = 1,  // shape, stride, alignment, dtype or head dim not supported
  FC_ERR_UNSUPPORTED_DEVICE = 2,  // not an SM 9.0 GPU
  FC_ERR_CUDA = 3,  // a CUDA runtime call failed; fc_last_error() has the text
};

typedef struct fc_params {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // may be NULL: LSE is then not written
  int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
  int64_t q_stride[3];  // batch, seq, head strides in elements (D stride is 1)
  int64_t k_stride[3];
  int64_t v_stride[3];
  int64_t o_stride[3];
  float softmax_scale;  // usually 1/sqrt(D)
  int32_t causal;
  int32_t dtype;  // enum fc_dtype
  int32_t debug_fault;  // 0 in production; >0 plants a test-only fault (see kernel/config.h FaultKind)
} fc_params;

// Launches the forward kernel on `stream` (a cudaStream_t, NULL for the default stream).
// Validates everything first: nothing is launched when the status is not FC_OK.
int fc_attention_forward(const fc_params* params, void* stream);

// The phase-1 kernel (mma.sync, cp.async producer warp): same contract, kept as a reference and for
// before/after comparisons (flashcore_driver --kernel phase1). Not used by the Python API.
int fc_attention_forward_phase1(const fc_params* params, void* stream);

// Human-readable text of the last failure on this thread (argument name, value, what is allowed).
const char* fc_last_error(void);

// 1 when `device` is an SM 9.0 GPU, 0 otherwise (with fc_last_error() saying what it is).
int fc_device_supported(int device);

// Version string of this build, e.g. "flashcore 0.1.0 phase1 sm_90a".
const char* fc_version(void);

#ifdef __cplusplus
}
#endif
