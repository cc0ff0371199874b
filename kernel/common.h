// Constants every kernel shares: log2(e), the 16-byte chunk, the test-only planted faults.
#pragma once
#include <cstdint>

namespace flashcore {

// log2(e): the softmax runs on exp2, so the host folds log2(e) into the scale (exp(x) = exp2(x * log2 e)).
constexpr float kLog2e = 1.4426950408889634f;

// A 16-byte chunk holds 8 16-bit elements: the unit of cp.async, ldmatrix rows and the smem swizzle.
constexpr int kChunkElems = 8;

// Test-only faults, planted on request to prove that each gate can fail. Never set in production.
enum FaultKind : int32_t {
  kFaultNone = 0,
  kFaultTailMaskOffByOne = 1,   // keeps key index seqlen_k (one past the end) unmasked: wrong result
  kFaultNondeterministic = 2,   // adds a racy global accumulation to O: results differ run to run
  kFaultSkipFirstRow = 3,       // leaves the first row of every query tile unwritten
  kFaultSlow = 4,               // correct but slow: the producer waits after every K/V tile (ncu, perf gates)
};

}  // namespace flashcore
