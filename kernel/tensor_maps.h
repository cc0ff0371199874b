// Host side: TMA tensor maps for the [B, S, H, D] tensors, encoded from their real strides.
#pragma once
#include <cuda.h>

#include <cstdint>

namespace flashcore {

// Encodes a 4-D map {D, S, H, B} (innermost first) with a box of {128 bytes, box_rows, box_heads, 1} elements of
// elem_bytes each (2: 16-bit, 1: FP8) and 128-byte swizzle (one box = one 128-byte chunk of a tile; box_heads > 1
// packs GQA query heads); swizzle_bytes 64: boxes of 64 bytes, 64-byte swizzle (FP8 V^T's 64-key tail chunk). `stride` = {batch, seq, head} in elements.
// Returns FC_OK or an fc_status with the reason stored for fc_last_error().
int encode_tensor_map(CUtensorMap* map, const char* name, const void* base, int64_t head_dim, int64_t seqlen,
                      int64_t heads, int64_t batch, const int64_t (&stride)[3], int box_rows, int box_heads = 1,
                      int elem_bytes = 2, int swizzle_bytes = 128);

}  // namespace flashcore
