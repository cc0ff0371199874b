// TMA tensor-map encoding through the driver entry point (nothing links against libcuda at build time).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "flashcore.h"
#include "launch.h"
#include "tensor_maps.h"

namespace flashcore {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (fn == nullptr) {
    cudaDriverEntryPointQueryResult status;
    void* ptr = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &status) ==
            cudaSuccess &&
        status == cudaDriverEntryPointSuccess) {
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
    }
  }
  return fn;
}

}  // namespace

int encode_tensor_map(CUtensorMap* map, const char* name, const void* base, int64_t head_dim, int64_t seqlen,
                      int64_t heads, int64_t batch, const int64_t (&stride)[3], int box_rows, int box_heads,
                      int elem_bytes, int swizzle_bytes) {
  auto encode = encode_fn();
  if (encode == nullptr) return report_error(FC_ERR_CUDA, "cuTensorMapEncodeTiled is not available from the driver");
  // A dim of size 1 is never stepped along, so its stride is free: give it a dense one TMA accepts.
  const int64_t dense[3] = {seqlen * heads * head_dim, heads * head_dim, head_dim};
  const int64_t sizes[3] = {batch, seqlen, heads};
  int64_t s[3];
  for (int i = 0; i < 3; ++i) s[i] = sizes[i] == 1 ? dense[i] : stride[i];
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(seqlen),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  // Byte strides of dims 1..3 (seq, head, batch): multiples of 16 and below 2^40 (checked by validate()).
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(s[1] * elem_bytes), static_cast<cuuint64_t>(s[2] * elem_bytes),
                                 static_cast<cuuint64_t>(s[0] * elem_bytes)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(swizzle_bytes / elem_bytes), static_cast<cuuint32_t>(box_rows),
                             static_cast<cuuint32_t>(box_heads), 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult res =
      encode(map, elem_bytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, const_cast<void*>(base), dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (res != CUDA_SUCCESS) {
    return report_error(FC_ERR_INVALID_ARGUMENT,
                        "%s: TMA cannot encode this tensor (cuTensorMapEncodeTiled error %d): strides (batch %lld, "
                        "seq %lld, head %lld elements) must be multiples of 16 bytes and the base 16-byte aligned",
                        name, static_cast<int>(res), static_cast<long long>(stride[0]),
                        static_cast<long long>(stride[1]), static_cast<long long>(stride[2]));
  }
  return FC_OK;
}

}  // namespace flashcore
