// Kernel-side parameters: what the launcher derives from fc_params once, on the host.
#pragma once
#include <cstdint>

namespace flashcore {

struct KernelParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // nullptr: not written
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k;
  int group;  // heads_q / heads_kv: query head h reads K/V head h / group
  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];  // batch, seq, head (elements)
  float softmax_scale;        // applied to Q K^T
  float softmax_scale_log2;   // softmax_scale * log2(e), for exp2
  int causal;
  int diag_offset;  // seqlen_k - seqlen_q: causal row i sees keys j <= i + diag_offset (bottom-right)
  int fault;        // FaultKind, test-only
};

}  // namespace flashcore
