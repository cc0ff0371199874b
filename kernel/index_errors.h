// Bad index data found on the device. Index arrays (page tables, lengths, slots, offsets) live in device memory, so
// the host cannot check them without a sync; the kernels that read them check each value where they read it, never
// read or write outside a tensor because of it, make the rows it touches NaN, and record the first bad value here.
// The word is four int64 in device memory owned by the caller (flashcore/device_errors.py: one per device, read and
// cleared by flashcore.check_errors()): [0] the tensor's code below (0: no error), [1] the element's index in that
// tensor, [2] the value found, [3] the bound it broke (values must lie in [0, bound); for cu_seqlens, the packed rows).
// The first error wins (a compare-and-swap on word 0); the others are dropped, so the report names one bad value.
#pragma once
#include <cstdint>

namespace flashcore {

// The tensors a code names (flashcore/device_errors.py keeps the same numbers and names).
enum IndexTensor : int64_t {
  kIndexNone = 0,
  kIndexPageTable = 1,      // a page id outside [0, pages)
  kIndexCacheSeqlens = 2,   // a length (with the append) above the sequence's capacity, or negative
  kIndexCacheBatchIdx = 3,  // a slot outside [0, cache batch)
  kIndexCacheLeftpad = 4,   // a left pad outside [0, cache_seqlens]
  kIndexCuSeqlensQ = 5,     // decreasing, or past the packed query rows
  kIndexCuSeqlensK = 6,     // decreasing, or past the packed key rows
  kIndexSequsedQ = 7,       // above its sequence's query count, or negative
  kIndexSequsedK = 8,       // above its sequence's key count, or negative
  kIndexCuSeqlensKNew = 9,  // decreasing, or past the packed new keys
  kIndexRotarySeqlens = 10, // a rotary position past the cos/sin table
};

// Record (tensor, index, value, bound) unless an earlier error is there. `words` may be nullptr (nothing recorded;
// the caller's protection of memory does not depend on it).
__device__ __forceinline__ void report_index_error(int64_t* words, IndexTensor tensor, int64_t index, int64_t value,
                                                   int64_t bound) {
  if (words == nullptr) return;
  auto* code = reinterpret_cast<unsigned long long*>(words);
  if (atomicCAS(code, 0ull, static_cast<unsigned long long>(tensor)) == 0ull) {
    words[1] = index;
    words[2] = value;
    words[3] = bound;
  }
}

}  // namespace flashcore
