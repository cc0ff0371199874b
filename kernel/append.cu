// FA3's append into a KV cache (flash_attn_with_kvcache's k and v), with its rotary embedding of the new keys and of
// q, as one launch that never writes outside a tensor: every index value it reads (slot, length, page id, offset,
// rotary position) is checked where it is read, a bad one skips the writes it governs and is recorded in the
// caller's error word (kernel/index_errors.h). Contract: fc_append_kv in kernel/flashcore.h.
//
// Build alone (make build links it into the library: kernel/kernel.mk):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -Xcompiler -fPIC -c kernel/append.cu
//
// Grid: x = sequence, y = the sequence's blocks: the first `kv_blocks` append its new rows (k with rotary, v copied),
// the rest write its rotated q rows. A block takes whole rows (several when a row has fewer tasks than threads);
// a thread task is W consecutive columns of one head of one row (W = 8 with 16-byte vectors, 2 otherwise).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "flashcore.h"
#include "index_errors.h"
#include "launch.h"

namespace flashcore {
namespace {

constexpr int kThreads = 256;
// Blocks per launch the y dimension aims at when packed sequences' lengths are unknown on the host: enough to fill
// an H200 (132 SMs) a few times over; a long sequence then loops over its rows in its blocks.
constexpr int64_t kTargetBlocks = 2048;
constexpr int64_t kMaxGridY = 65535;

// One sequence's append, read once per block by thread 0 and checked there.
struct Sequence {
  int ok;              // 0: a bad index value: nothing of it is written (q rows NaN), its new length is -1
  int64_t entry;       // cache entry (contiguous) or page-table row (paged)
  int64_t start;       // cache_seqlens[b]: the first new row's position in the sequence
  int64_t n_new;       // new rows
  int64_t new_offset;  // its first row in k_new / v_new (packed: cu_seqlens_k_new[b])
  int64_t rotary_base; // rotary position of its first new key (rotary_seqlens[b], else cache_seqlens[b])
  int64_t q_offset;    // its first q row (packed: cu_seqlens_q[b])
  int64_t n_q;         // its q rows
};

// 16-bit element <-> fp32: exact one way, round-to-nearest-even the other (__half's and __nv_bfloat16's own
// conversions, as torch's .to()).
template <typename T>
__device__ __forceinline__ float to_float(T x) { return static_cast<float>(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x) { return T(x); }

// W elements at `ptr`: one 16-byte access when W == 8 (the host chose W = 8 only for 16-byte aligned rows).
template <typename T, int W>
struct Chunk {
  alignas(16) T x[W];  // one 16-byte register access when W == 8
  __device__ __forceinline__ void load(const T* ptr) {
    if constexpr (W == 8) {
      *reinterpret_cast<uint4*>(x) = *reinterpret_cast<const uint4*>(ptr);
    } else {
#pragma unroll
      for (int i = 0; i < W; ++i) x[i] = ptr[i];
    }
  }
  __device__ __forceinline__ void store(T* ptr) const {
    if constexpr (W == 8) {
      *reinterpret_cast<uint4*>(ptr) = *reinterpret_cast<const uint4*>(x);
    } else {
#pragma unroll
      for (int i = 0; i < W; ++i) ptr[i] = x[i];
    }
  }
};

// The rotation of FA3 (hopper/rotary.h) in fp32, rounded once: real = x0 cos - x1 sin, imag = x0 sin + x1 cos.
// Explicit _rn operations: no fused multiply-add, so the result is bit-identical to the same formula evaluated
// op by op in fp32 (flashcore/rotary.py, torch).
__device__ __forceinline__ void rotate(float x0, float x1, float c, float s, float& real, float& imag) {
  real = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  imag = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

// Task `u` of one head row: rotary chunks first (interleaved: W columns = W / 2 pairs; else W columns of each half,
// paired with the same columns rotary_dim / 2 to the right), then plain copies of the columns past rotary_dim.
// `cos_row` / `sin_row`: the position's table row (nullptr: no rotary). Columns past `dim` (v's head dim) unused.
template <typename T, int W>
__device__ __forceinline__ void head_task(const fc_append_params& p, const T* src, T* dst, int u, int dim,
                                          const T* cos_row, const T* sin_row) {
  const int rotary_dim = cos_row != nullptr ? static_cast<int>(p.rotary_dim) : 0;
  const int rotary_tasks = p.rotary_interleaved ? rotary_dim / W : rotary_dim / (2 * W);
  if (u < rotary_tasks) {
    const int col = u * W;
    if (p.rotary_interleaved) {
      Chunk<T, W> x;
      x.load(src + col);
#pragma unroll
      for (int i = 0; i < W / 2; ++i) {
        float real, imag;
        rotate(to_float(x.x[2 * i]), to_float(x.x[2 * i + 1]), to_float(cos_row[col / 2 + i]),
               to_float(sin_row[col / 2 + i]), real, imag);
        x.x[2 * i] = from_float<T>(real);
        x.x[2 * i + 1] = from_float<T>(imag);
      }
      x.store(dst + col);
    } else {
      const int half = rotary_dim / 2;
      Chunk<T, W> left, right, c, s;
      left.load(src + col);
      right.load(src + col + half);
      c.load(cos_row + col);
      s.load(sin_row + col);
#pragma unroll
      for (int i = 0; i < W; ++i) {
        float real, imag;
        rotate(to_float(left.x[i]), to_float(right.x[i]), to_float(c.x[i]), to_float(s.x[i]), real, imag);
        left.x[i] = from_float<T>(real);
        right.x[i] = from_float<T>(imag);
      }
      left.store(dst + col);
      right.store(dst + col + half);
    }
    return;
  }
  const int col = rotary_dim + (u - rotary_tasks) * W;
  if (col >= dim) return;
  Chunk<T, W> x;
  x.load(src + col);
  x.store(dst + col);
}

// Tasks per head row: rotary chunks and copy chunks (head_task's order).
__host__ __device__ inline int tasks_per_head(int64_t dim, int64_t rotary_dim, int interleaved, int w) {
  const int64_t rotary_tasks = interleaved ? rotary_dim / w : rotary_dim / (2 * w);
  return static_cast<int>(rotary_tasks + (dim - rotary_dim) / w);
}

// Sequence b's rows of a packed tensor (rows [cu[b], cu[b + 1]) of `total`, both offsets checked) or of a
// [batch, rows, ...] one (cu nullptr: `rows` each); false for a bad offset (reported as `code`).
__device__ bool read_rows(const int32_t* cu, int64_t b, int64_t total, int64_t rows, IndexTensor code,
                          int64_t* errors, int64_t& offset, int64_t& count) {
  if (cu == nullptr) {
    offset = b * rows;
    count = rows;
    return true;
  }
  const int64_t first = cu[b], last = cu[b + 1];
  if (first < 0 || first > total) {
    report_index_error(errors, code, b, first, total + 1);
    return false;
  }
  if (last < first || last > total) {
    report_index_error(errors, code, b + 1, last, total + 1);
    return false;
  }
  offset = first;
  count = last - first;
  return true;
}

// Thread 0's reading of sequence b: every index value checked, the first bad one reported (by block y = 0 only, so
// one sequence records one error once). Every block of the sequence reaches the same verdict.
__device__ Sequence read_sequence(const fc_append_params& p, int64_t b, bool report) {
  Sequence s{};
  int64_t* errors = report ? p.errors : nullptr;
  // Its q rows first: a sequence with another bad value still knows which q rows to make NaN.
  if (p.q != nullptr &&
      !read_rows(p.cu_seqlens_q, b, p.total_q, p.seqlen_q, kIndexCuSeqlensQ, errors, s.q_offset, s.n_q)) {
    return s;
  }
  const int64_t slot = p.cache_batch_idx != nullptr ? p.cache_batch_idx[b] : b;
  const int64_t entries = p.page_table != nullptr ? p.page_table_rows : p.cache_batch;
  if (slot < 0 || slot >= entries) {
    report_index_error(errors, kIndexCacheBatchIdx, b, slot, entries);
    return s;
  }
  s.entry = slot;
  if (!read_rows(p.cu_seqlens_k_new, b, p.total_new, p.seqlen_new, kIndexCuSeqlensKNew, errors, s.new_offset,
                 s.n_new)) {
    return s;
  }
  s.start = p.cache_seqlens[b];
  if (s.start < 0 || s.start + s.n_new > p.capacity) {
    report_index_error(errors, kIndexCacheSeqlens, b, s.start, p.capacity - s.n_new + 1);
    return s;
  }
  if (p.rotary_cos != nullptr) {
    s.rotary_base = p.rotary_seqlens != nullptr ? p.rotary_seqlens[b] : s.start;
    // The rows of the table it reads: its new keys', and its queries' (one row unless positions go per row).
    const int64_t q_span = s.n_q > 0 ? (p.q_rotary_per_row ? s.n_q : 1) : 0;
    const int64_t span = s.n_new > q_span ? s.n_new : q_span;
    if (s.rotary_base < 0 || s.rotary_base + span > p.rotary_rows) {
      report_index_error(errors, kIndexRotarySeqlens, b, s.rotary_base, p.rotary_rows - span + 1);
      return s;
    }
  }
  s.ok = 1;
  return s;
}

template <typename T, int W>
__global__ void __launch_bounds__(kThreads) append_kernel(const fc_append_params p, int kv_blocks) {
  __shared__ Sequence seq;
  const int64_t b = blockIdx.x;
  if (threadIdx.x == 0) {
    seq = read_sequence(p, b, blockIdx.y == 0);
    if (blockIdx.y == 0 && p.seqlens_out != nullptr) {
      p.seqlens_out[b] = seq.ok ? static_cast<int32_t>(seq.start + seq.n_new) : -1;
    }
  }
  __syncthreads();
  const Sequence s = seq;
  const bool kv_part = static_cast<int>(blockIdx.y) < kv_blocks;
  const int64_t rows = kv_part ? s.n_new : s.n_q;
  const int heads = static_cast<int>(kv_part ? p.heads_kv : p.heads_q);
  const int k_tasks = tasks_per_head(p.head_dim, p.rotary_dim, p.rotary_interleaved, W);
  const int v_tasks = kv_part ? static_cast<int>(p.head_dim_v / W) : 0;
  const int row_tasks = heads * (k_tasks + v_tasks);
  const int rows_per_group = row_tasks >= kThreads ? 1 : kThreads / row_tasks;
  const int64_t groups = (rows + rows_per_group - 1) / rows_per_group;
  const int64_t first = kv_part ? blockIdx.y : blockIdx.y - kv_blocks;
  const int64_t step = kv_part ? kv_blocks : gridDim.y - kv_blocks;
  if (!s.ok && (kv_part || p.q == nullptr)) return;  // nothing of a bad sequence is written but its NaN q rows
  const T* cos_table = static_cast<const T*>(p.rotary_cos);
  const T* sin_table = static_cast<const T*>(p.rotary_sin);
  for (int64_t g = first; g < groups; g += step) {
    for (int i = threadIdx.x; i < rows_per_group * row_tasks; i += kThreads) {
      const int64_t j = g * rows_per_group + i / row_tasks;  // row within the sequence
      if (j >= rows) break;
      const int task = i % row_tasks;
      const int h = task / (k_tasks + v_tasks);
      const int u = task % (k_tasks + v_tasks);
      if (kv_part) {
        const int64_t pos = s.start + j;
        int64_t entry = s.entry, row = pos;
        if (p.page_table != nullptr) {
          const uint32_t column = static_cast<uint32_t>(pos) / static_cast<uint32_t>(p.page_size);
          const int64_t at = s.entry * p.page_table_stride + column;
          const int64_t page = p.page_table[at];
          if (page < 0 || page >= p.cache_batch) {
            report_index_error(p.errors, kIndexPageTable, at, page, p.cache_batch);
            continue;
          }
          entry = page;
          row = static_cast<uint32_t>(pos) - column * static_cast<uint32_t>(p.page_size);
        }
        const bool is_k = u < k_tasks;
        const int64_t* src_stride = is_k ? p.k_new_stride : p.v_new_stride;
        const int64_t* dst_stride = is_k ? p.k_cache_stride : p.v_cache_stride;
        const int64_t src_row = s.new_offset + j;  // packed: k_new_stride[0] is 0 and rows count from 0
        const T* src = static_cast<const T*>(is_k ? p.k_new : p.v_new) +
                       (p.cu_seqlens_k_new != nullptr ? src_row * src_stride[1]
                                                      : b * src_stride[0] + j * src_stride[1]) +
                       h * src_stride[2];
        T* dst = static_cast<T*>(is_k ? p.k_cache : p.v_cache) + entry * dst_stride[0] + row * dst_stride[1] +
                 h * dst_stride[2];
        const int64_t ro = s.rotary_base + j;
        const bool rotary = is_k && cos_table != nullptr;
        head_task<T, W>(p, src, dst, is_k ? u : u - k_tasks, static_cast<int>(is_k ? p.head_dim : p.head_dim_v),
                        rotary ? cos_table + ro * p.rotary_cos_stride : nullptr,
                        rotary ? sin_table + ro * p.rotary_sin_stride : nullptr);
      } else {
        const int64_t q_row = s.q_offset + j;
        const T* src = static_cast<const T*>(p.q) + (p.cu_seqlens_q != nullptr ? q_row * p.q_stride[1]
                                                                               : b * p.q_stride[0] + j * p.q_stride[1]) +
                       h * p.q_stride[2];
        T* dst = static_cast<T*>(p.q_out) + (p.cu_seqlens_q != nullptr ? q_row * p.q_out_stride[1]
                                                                       : b * p.q_out_stride[0] + j * p.q_out_stride[1]) +
                 h * p.q_out_stride[2];
        if (!s.ok) {  // its attention rows become NaN: task 0 of each head row fills the row
          if (u == 0) {
            for (int col = 0; col < p.head_dim; ++col) dst[col] = from_float<T>(__int_as_float(0x7fc00000));
          }
          continue;
        }
        const int64_t ro = s.rotary_base + (p.q_rotary_per_row ? j : 0);
        head_task<T, W>(p, src, dst, u, static_cast<int>(p.head_dim), cos_table + ro * p.rotary_cos_stride,
                        sin_table + ro * p.rotary_sin_stride);
      }
    }
  }
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// 16-byte vectors when every row a task touches starts on 16 bytes: bases aligned, strides multiples of 8 elements.
bool vectorizable(const fc_append_params* p) {
  const void* bases[] = {p->k_new, p->v_new, p->k_cache, p->v_cache, p->rotary_cos, p->rotary_sin, p->q, p->q_out};
  for (const void* base : bases) {
    if (base != nullptr && !aligned16(base)) return false;
  }
  const int64_t strides[] = {p->k_new_stride[0],   p->k_new_stride[1],   p->k_new_stride[2],  p->v_new_stride[0],
                             p->v_new_stride[1],   p->v_new_stride[2],   p->k_cache_stride[0], p->k_cache_stride[1],
                             p->k_cache_stride[2], p->v_cache_stride[0], p->v_cache_stride[1], p->v_cache_stride[2],
                             p->q_stride[0],       p->q_stride[1],       p->q_stride[2],       p->q_out_stride[0],
                             p->q_out_stride[1],   p->q_out_stride[2],   p->rotary_cos_stride, p->rotary_sin_stride,
                             p->head_dim,          p->head_dim_v,        p->rotary_dim / 2};
  for (int64_t stride : strides) {
    if (stride % 8 != 0) return false;
  }
  return true;
}

int check_params(const fc_append_params* p) {
  if (p == nullptr) return report_error(FC_ERR_INVALID_ARGUMENT, "append params is NULL");
  if (p->dtype != FC_FP16 && p->dtype != FC_BF16) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "append dtype %d: fp16 or bf16 only", p->dtype);
  }
  if (p->k_new == nullptr || p->v_new == nullptr || p->k_cache == nullptr || p->v_cache == nullptr ||
      p->cache_seqlens == nullptr) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "k_new, v_new, k_cache, v_cache and cache_seqlens must be set");
  }
  if (p->batch < 0 || p->batch > INT32_MAX || p->heads_kv < 1 || p->heads_kv > 65536 || p->cache_batch < 1) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "append batch %lld, heads_kv %lld, cache entries %lld out of range",
                        static_cast<long long>(p->batch), static_cast<long long>(p->heads_kv),
                        static_cast<long long>(p->cache_batch));
  }
  if (p->head_dim < 2 || p->head_dim % 2 != 0 || p->head_dim_v < 2 || p->head_dim_v % 2 != 0 ||
      p->head_dim > 1024 || p->head_dim_v > 1024) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "append head dims %lld and %lld: even, 2 .. 1024",
                        static_cast<long long>(p->head_dim), static_cast<long long>(p->head_dim_v));
  }
  if (p->capacity < 0 || p->capacity >= INT32_MAX || p->seqlen_new < 0 || p->total_new < 0) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "append capacity %lld (below 2^31), new rows %lld / %lld",
                        static_cast<long long>(p->capacity), static_cast<long long>(p->seqlen_new),
                        static_cast<long long>(p->total_new));
  }
  if (p->page_table != nullptr && (p->page_size < 1 || p->page_table_rows < 1 || p->page_table_stride < 0)) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "paged append: page size %lld, page-table rows %lld",
                        static_cast<long long>(p->page_size), static_cast<long long>(p->page_table_rows));
  }
  if ((p->rotary_cos == nullptr) != (p->rotary_sin == nullptr)) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "rotary_cos and rotary_sin go together");
  }
  if (p->rotary_cos != nullptr &&
      (p->rotary_dim < 16 || p->rotary_dim % 16 != 0 || p->rotary_dim > p->head_dim || p->rotary_rows < 0)) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "rotary_dim %lld: a multiple of 16 in 16 .. head dim %lld",
                        static_cast<long long>(p->rotary_dim), static_cast<long long>(p->head_dim));
  }
  if (p->rotary_cos == nullptr && (p->rotary_dim != 0 || p->q != nullptr)) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "rotary_dim and q need rotary_cos and rotary_sin");
  }
  if (p->q != nullptr && (p->q_out == nullptr || p->heads_q < 1 || p->heads_q > 65536 || p->seqlen_q < 0 ||
                          p->total_q < 0)) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "q rotary: q_out, heads_q %lld, rows out of range",
                        static_cast<long long>(p->heads_q));
  }
  return FC_OK;
}

template <typename T, int W>
int launch(const fc_append_params* p, cudaStream_t stream) {
  const int k_tasks = tasks_per_head(p->head_dim, p->rotary_dim, p->rotary_interleaved, W);
  const int64_t kv_row_tasks = p->heads_kv * (k_tasks + p->head_dim_v / W);
  // Groups of rows one block takes per step, for the longest possible sequence and for the average one.
  auto blocks_for = [&](int64_t row_tasks, int64_t longest, int64_t total) -> int64_t {
    const int64_t per_group = row_tasks >= kThreads ? 1 : kThreads / row_tasks;
    const int64_t most = (longest + per_group - 1) / per_group;
    const int64_t mean = p->batch > 0 ? (total / p->batch + per_group - 1) / per_group : 0;
    int64_t blocks = most < kTargetBlocks / (p->batch > 0 ? p->batch : 1) ? most : kTargetBlocks / p->batch;
    blocks = blocks > mean ? blocks : mean;
    blocks = blocks < 1 ? 1 : blocks;
    return blocks < kMaxGridY / 2 ? blocks : kMaxGridY / 2;
  };
  const bool packed = p->cu_seqlens_k_new != nullptr;
  const int64_t kv_blocks = blocks_for(kv_row_tasks, packed ? p->total_new : p->seqlen_new,
                                       packed ? p->total_new : p->seqlen_new * p->batch);
  int64_t q_blocks = 0;
  if (p->q != nullptr) {
    const bool packed_q = p->cu_seqlens_q != nullptr;
    q_blocks = blocks_for(p->heads_q * k_tasks, packed_q ? p->total_q : p->seqlen_q,
                          packed_q ? p->total_q : p->seqlen_q * p->batch);
  }
  const dim3 grid(static_cast<unsigned>(p->batch), static_cast<unsigned>(kv_blocks + q_blocks));
  append_kernel<T, W><<<grid, kThreads, 0, stream>>>(*p, static_cast<int>(kv_blocks));
  return report_cuda(cudaGetLastError(), "append kernel launch");
}

}  // namespace
}  // namespace flashcore

extern "C" int fc_append_kv(const fc_append_params* params, void* stream) {
  using namespace flashcore;
  int status = check_params(params);
  if (status != FC_OK) return status;
  int device = 0;
  if ((status = report_cuda(cudaGetDevice(&device), "cudaGetDevice")) != FC_OK) return status;
  if (!fc_device_supported(device)) return FC_ERR_UNSUPPORTED_DEVICE;
  if (params->batch == 0) return FC_OK;
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  const bool wide = vectorizable(params);
  if (params->dtype == FC_BF16) {
    return wide ? launch<__nv_bfloat16, 8>(params, cuda_stream) : launch<__nv_bfloat16, 2>(params, cuda_stream);
  }
  return wide ? launch<__half, 8>(params, cuda_stream) : launch<__half, 2>(params, cuda_stream);
}
