// mbarrier wrappers (shared-memory barriers with phase parity) and the one list of barrier slots.
// PTX ISA: mbarrier.init / arrive / try_wait.parity; cp.async.mbarrier.arrive.noinc.
#pragma once
#include <cstdint>

namespace flashcore {

// Slots of the mbarrier array that sits at the end of shared memory.
// kQFull: the Q tile landed.  kKVFull + s: stage s holds K and V.  kKVEmpty + s: consumers are done with stage s.
template <int kStages>
struct BarrierSlots {
  static constexpr int kQFull = 0;
  static constexpr int kKVFull = 1;
  static constexpr int kKVEmpty = 1 + kStages;
  static constexpr int kCount = 1 + 2 * kStages;
};

__device__ __forceinline__ uint32_t smem_addr(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}

// Makes the initialized barriers visible to every proxy before first use (required before async-proxy use).
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival with release semantics: this thread's earlier shared-memory accesses happen before
// the phase completes for the waiters.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Arrives on `bar` once every cp.async this thread issued so far has landed (the thread does not wait).
// .noinc: the arrival counts against the count given at init (one per producer lane).
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Blocks until the phase with the given parity has completed (acquire semantics).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// Whether the phase with the given parity has completed, without waiting (acquire semantics when it has).
__device__ __forceinline__ bool mbarrier_test(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.test_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

// As mbarrier_wait, but a thread that finds the phase incomplete is suspended until it completes (the hint caps the
// sleep at 1 ms per try) instead of polling. For the producer thread: its polling loop on the empty slots ran ~200
// times per V stage on the H100 (ncu, hdim 128: 9 % of the kernel's instructions), issue slots taken from the
// consumer warps that share its SM sub-partition.
__device__ __forceinline__ void mbarrier_wait_sleep(uint64_t* bar, uint32_t parity) {
  constexpr uint32_t kSuspendHintNs = 1000000;
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2, %3;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity), "r"(kSuspendHintNs)
        : "memory");
  } while (!done);
}

// Named barriers: bar.sync waits until `threads` threads have arrived (itself included); bar.arrive
// counts this thread without waiting.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// The same without .aligned (bar.sync is barrier.sync.aligned): for a barrier that warps may reach from different
// instructions or with their threads apart, e.g. a loop whose trip count differs per thread just before it.
__device__ __forceinline__ void named_barrier_sync_unaligned(int id, int threads) {
  asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace flashcore
