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

enum fc_dtype { FC_FP16 = 0, FC_BF16 = 1, FC_E4M3 = 2 };

// The head dims FlashCore takes, as FA3: X(head_dim, head_dim_v, fp8_supported) per entry; every other head dim (and
// pair) is refused with FC_ERR_INVALID_ARGUMENT. Every multiple of 8 up to 256 (a row of 8 16-bit elements is one
// 16-byte TMA chunk), and FA3's v head dims of their own: head dims 136..192 with v 104..128 (192 with v 128 is
// DeepSeek-style prefill). Each runs on the smallest compiled kernel that holds it (kernel/head_dims.h KernelHeadDims:
// 32, 64, 96, 128, 160, 192, 224, 256; 192 with v 128 on the 192 kernel): the TMA maps have the tensors' own head dims,
// so TMA zero-fills the kernel's missing columns on loads and clips them on the store. FP8 (FC_E4M3) runs the head dims
// with fp8_supported 1, each on an FP8 kernel of its own (the other kernels are 16-bit only). fc_head_dims() gives the
// table to callers that cannot read this header.
#define FC_HEAD_DIM_TABLE(X)                                                                                       \
  X(8, 8, 0) X(16, 16, 0) X(24, 24, 0) X(32, 32, 0) X(40, 40, 0) X(48, 48, 0) X(56, 56, 0) X(64, 64, 1)            \
  X(72, 72, 0) X(80, 80, 0) X(88, 88, 0) X(96, 96, 0) X(104, 104, 0) X(112, 112, 0) X(120, 120, 0) X(128, 128, 1)  \
  X(136, 136, 0) X(144, 144, 0) X(152, 152, 0) X(160, 160, 0) X(168, 168, 0) X(176, 176, 0) X(184, 184, 0)         \
  X(192, 192, 0) X(200, 200, 0) X(208, 208, 0) X(216, 216, 0) X(224, 224, 0) X(232, 232, 0) X(240, 240, 0)         \
  X(248, 248, 0) X(256, 256, 1)                                                                                    \
  X(136, 128, 0) X(136, 120, 0) X(136, 112, 0) X(136, 104, 0) X(144, 128, 0) X(144, 120, 0) X(144, 112, 0)         \
  X(144, 104, 0) X(152, 128, 0) X(152, 120, 0) X(152, 112, 0) X(152, 104, 0) X(160, 128, 0) X(160, 120, 0)         \
  X(160, 112, 0) X(160, 104, 0) X(168, 128, 0) X(168, 120, 0) X(168, 112, 0) X(168, 104, 0) X(176, 128, 0)         \
  X(176, 120, 0) X(176, 112, 0) X(176, 104, 0) X(184, 128, 0) X(184, 120, 0) X(184, 112, 0) X(184, 104, 0)         \
  X(192, 128, 0) X(192, 120, 0) X(192, 112, 0) X(192, 104, 0)

// FP8: where V is transposed for the P V GEMM (kernel/fp8_vt.cuh). AUTO: by the shape (kernel/tile_choice.h
// use_fp8_vt_smem: few query rows per K/V head, as in decode, take SMEM); PASS: V^T is a copy in the workspace, each
// block written once per call by the attention kernel's producer warpgroup while its GEMMs run (the name is from
// the pre-pass kernel that wrote it before, up to kernel 3c0cf60417635738); SMEM: the producer warpgroup transposes
// each block in shared memory for every query tile that reads it.
enum fc_fp8_v_transpose { FC_FP8_VT_AUTO = 0, FC_FP8_VT_PASS = 1, FC_FP8_VT_SMEM = 2 };

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
  int32_t debug_fault;  // 0 in production; >0 plants a test-only fault (see kernel/common.h FaultKind)
  // Split-KV (short queries, few heads: too few tiles to fill the GPU): each tile's keys are divided among
  // `num_splits` CTAs that write fp32 partial results into `workspace`; a second kernel adds them in split
  // order (deterministic). fc_plan() says how many splits a call uses and how much workspace it needs.
  int32_t num_splits;     // 0: chosen from the shapes and the GPU's SM count; 1: never split; N > 1: N (at most
                          // one per K/V block)
  int32_t deterministic;  // 1: the automatic choice ignores the GPU's SM count and sm_margin: one plan per shape,
                          // so results are bit-identical on any GPU and with any sm_margin
  int32_t sm_margin;      // SMs to leave to concurrent work when choosing the split count (>= 0)
  void* workspace;        // >= fc_plan's workspace_bytes, 16-byte aligned; may be NULL when that is 0
  int64_t workspace_bytes;
  // Tile configuration: the autotuner's knobs (harness/tune). 0 everywhere: the hand-tuned defaults. A value that
  // is not valid or not compiled is rejected with FC_ERR_INVALID_ARGUMENT; none of them changes the arithmetic of a
  // tile except block_n (which keys share a tile: the last bits may differ between block_n values) and schedule (the
  // stream-K tail, below).
  int32_t block_n;         // keys per K/V tile: 0 = kernel/tile_choice.h's choice; else one of
                           // fc_block_n_options(head_dim) (hdim 64: 128; 96 and 128: 128, 176;
                           // 192: 112; 256: 80)
  int32_t schedule;        // tile order: FC_SCHEDULE_DEFAULT (static for equal tiles, dynamic under causal
                           // masking), FC_SCHEDULE_STATIC, FC_SCHEDULE_DYNAMIC (an atomic tile counter) or
                           // FC_SCHEDULE_WHOLE (static, no stream-K tail). A static order of equal tiles (no causal
                           // mask, window or per-sequence lengths) cuts the tiles of its last, partial wave into
                           // pieces whose fp32 partials are added in a fixed order (kernel/stream_tail.h): those
                           // tiles' last bits may differ from a whole tile's (FC_SCHEDULE_WHOLE, or dynamic)
  int32_t l2_section_pct;  // dynamic order: % of the L2 that the K/V of one section of (batch, head) pairs may
                           // take, 1..100; 0 = the default (a third; FP8 hdim 256: two thirds)
  int32_t point;           // compile-time point (kernel/tile_point.h: keys per tile, K/V stages, consumer
                           // warpgroups, ping-pong, early rescale, producer registers): 0 = the default; else one
                           // of fc_points(head_dim)
  // Serving layouts and score modifiers; zero / NULL everywhere: a dense batch, no window, no soft-capping.
  // Device int32 arrays, read by the kernel (their values cannot be checked on the host without a copy; see
  // flashcore.serving's debug checks): sequence b of `batch` has
  const int32_t* cu_seqlens_q;  // [batch + 1], 0 = cu[0] <= cu[1] <= ... <= total_q: queries packed as rows
                                // [cu[b], cu[b + 1]) of q and o, which are [total_q, Hq, D] (q_stride[0] and
                                // o_stride[0] unused); seqlen_q is then the longest sequence, lse [Hq, total_q]
  const int32_t* cu_seqlens_k;  // [batch + 1], likewise for keys: k and v [total_k, Hkv, D]; seqlen_k the longest
  const int32_t* seqused_q;     // [batch], with cu_seqlens_q: the sequence uses its first seqused_q[b] queries only
                                // (<= its length; FA3's seqused_q): masks and the causal diagonal take it as the
                                // sequence's query count; o and lse rows past it are not written
  const int32_t* seqused_k;     // [batch]: the sequence attends to its first seqused_k[b] keys only (<= its length)
  const int32_t* kv_batch_idx;  // [batch]: its keys are k/v batch entry kv_batch_idx[b] in [0, kv_batch) (a KV
                                // cache's slot); with page_table, the row of page_table it reads (FA3's); not with
                                // cu_seqlens_k
  const int32_t* leftpad_k;     // [batch], with seqused_k: its keys start at row leftpad_k[b] of its cache, pages or
                                // packed rows, and it attends to keys [leftpad_k[b], seqused_k[b]) (FA3's leftpad_k,
                                // the KV cache's cache_leftpad: k_len = seqused_k - leftpad_k)
  int64_t total_q;   // rows of packed q and o (with cu_seqlens_q), >= 1
  int64_t total_k;   // rows of packed k and v (with cu_seqlens_k), >= 1
  int64_t kv_batch;  // batch entries of k and v: 0 = batch (kv_batch_idx may index a larger cache)
  int32_t window;        // 1: sliding window: query row i sees keys [i + d - window_left, i + d + window_right],
  int32_t window_left;   // d = its sequence's seqlen_k - seqlen_q (bottom-right), -1 = unbounded on that side;
  int32_t window_right;  // causal sets window_right to 0. Not with the phase-1 kernel.
  float softcap;         // > 0: scores = softcap * tanh(softmax_scale * q.k / softcap) (Gemma-style); 0: off
  // Head dim of v and o when it differs from q and k's (0: head_dim): a (head_dim, head_dim_v) pair of
  // FC_HEAD_DIM_TABLE.
  int64_t head_dim_v;
  // Paged KV cache: k and v are [kv_batch pages, page_size, Hkv, D] (k_stride[0]: the page stride); sequence b's
  // key j is row j % page_size of page page_table[r * page_table_stride + j / page_size], r = kv_batch_idx[b]
  // (default b; r * page_table_stride below 2^31). Needs seqused_k (its keys); not with cu_seqlens_k. page_size:
  // 1 .. 65536 keys. Page ids are not checked on the host (a device array): the kernel checks each one it reads
  // against [0, kv_batch) (errors, below).
  const int32_t* page_table;
  int64_t page_table_stride;  // elements between sequences' rows of page_table (>= pages per sequence)
  int64_t page_size;
  // FP8 (dtype FC_E4M3): q, k and v are E4M3 (strides multiples of 16 elements), o is bf16; the head dims
  // FC_HEAD_DIM_TABLE marks fp8_supported, dense batches (no serving field). The real q is q * q_descale[b, h / (Hq / Hkv)], likewise k and v: device fp32
  // arrays [batch, heads_kv] with element strides {batch, head} (NULL: 1; FA3's q_descale, k_descale, v_descale).
  // The workspace (fc_plan) then also holds V's transposed copy and its block flags where V goes through the copy
  // (fp8_v_transpose). NULL for 16-bit dtypes.
  const float* q_descale;
  const float* k_descale;
  const float* v_descale;
  int64_t q_descale_stride[2];
  int64_t k_descale_stride[2];
  int64_t v_descale_stride[2];
  int32_t fp8_v_transpose;  // FP8: enum fc_fp8_v_transpose (0: by the shape); 0 for 16-bit dtypes
  // Chunked local attention (FA3's attention_chunk; 0: off): with C > 0, query row i sees only the keys of the chunk
  // [c, c + C) holding its key-aligned position i + d (c a multiple of C from the sequence's first key), within its
  // causal and window bounds. 16-bit inputs on the Hopper kernel.
  int32_t attention_chunk;
  // Attention sinks (GPT-OSS; s_aux in vLLM's FA3 fork; NULL: none): device fp32 [heads_q], query head h's sink
  // logit, in raw units (not scaled by softmax_scale), joins each row's softmax as one more key without a value:
  // O = sum_j e^{s_j} v_j / (sum_j e^{s_j} + e^{sink_h}), LSE = log(sum_j e^{s_j} + e^{sink_h}); a row that sees no
  // key writes O = 0 and LSE = sink_h. 16-bit inputs on the Hopper kernel.
  const float* sinks;
  // Rows of page_table (0: batch); with kv_batch_idx, each slot must name one of them (the device checks it).
  int64_t page_table_rows;
  // Bad index data in the device arrays above (a page id, slot, length or offset out of range) is found by the kernel
  // where it reads it: no load or store leaves its tensor, the sequence's o rows and LSE are NaN, and the first bad
  // value is recorded here (kernel/index_errors.h: four int64 in device memory; NULL: not recorded).
  int64_t* errors;
} fc_params;
enum fc_schedule { FC_SCHEDULE_DEFAULT = 0, FC_SCHEDULE_STATIC = 1, FC_SCHEDULE_DYNAMIC = 2, FC_SCHEDULE_WHOLE = 3 };

// What a call with these params will launch (nothing is launched by fc_plan itself).
typedef struct fc_plan_info {
  int32_t num_splits;       // K/V splits per tile (1: no split, no combine kernel)
  int32_t pack_gqa;         // 1: the query heads of a K/V head share one tile (short queries with GQA)
  int64_t ctas;             // CTAs of the attention kernel
  int64_t workspace_bytes;  // fp32 partials of every split and of the stream-K tail, the tile counter, FP8 V^T
  int32_t block_n;          // keys per K/V tile
  int32_t dynamic;          // 1: tiles taken from an atomic counter; 0: static order
  int32_t section_heads;    // (batch, head) pairs per section of the tile order (some sections take one more)
  int32_t point;            // the compile-time point launched (kernel/tile_point.h)
  int32_t fp8_v_transpose;  // FP8: FC_FP8_VT_PASS or FC_FP8_VT_SMEM, the way V is transposed; 0 for 16-bit dtypes
  int32_t tail_tiles;       // stream-K tail: tiles of the last wave cut into pieces (0: none; kernel/stream_tail.h)
  int32_t tail_pieces;      // ... the pieces they are cut into (the workspace holds their fp32 partials)
} fc_plan_info;

// Launches the forward kernel on `stream` (a cudaStream_t, NULL for the default stream), with what it needs there:
// a small kernel that zeroes the workspace's counters and flags first, where the plan has any (the forward kernel is
// then a programmatic dependent launch: it starts as that kernel's blocks exit), and the kernels that sum split-KV or
// stream-K tail partials after it (docs/design.md). Validates everything first: nothing is launched when the status
// is not FC_OK.
int fc_attention_forward(const fc_params* params, void* stream);

// Validates `params` (except workspace) and fills `plan`. Call it to size the workspace before
// fc_attention_forward.
int fc_plan(const fc_params* params, fc_plan_info* plan);

// The phase-1 kernel (mma.sync, cp.async producer warp): same contract, kept as a reference and for
// before/after comparisons (flashcore_driver --kernel phase1). Not used by the Python API.
int fc_attention_forward_phase1(const fc_params* params, void* stream);

// Human-readable text of the last failure on this thread (argument name, value, what is allowed).
const char* fc_last_error(void);

// 1 when `device` is an SM 9.0 GPU, 0 otherwise (with fc_last_error() saying what it is).
int fc_device_supported(int device);

// Version string of this build, e.g. "flashcore 0.1.0 phase1 sm_90a".
const char* fc_version(void);
// Content hash of the kernel sources this library was built from (kernel/*.h, *.cuh, *.cu): a tuned table
// (harness/tune) is valid for the kernel it was measured on only.
const char* fc_kernel_id(void);
// The compiled BLOCK_N values for `head_dim` (ascending) into out[0 .. max); returns how many there are (0 for an
// unsupported head dim). Head dims between the kernels' answer for the kernel that runs them (72: 96, 160: 192),
// as fc_points does.
int fc_block_n_options(int head_dim, int32_t* out, int max);
// The compiled points for `head_dim` (kernel/tile_point.h codes: the defaults first, then, unless defaults_only,
// the points file's) into out[0 .. max); returns how many there are (0 for an unsupported head dim).
int fc_points(int head_dim, int32_t* out, int max, int defaults_only);
// FC_HEAD_DIM_TABLE's entries, in its order: up to `capacity` triples (head_dim, head_dim_v, fp8_supported) into
// out[3 * i .. 3 * i + 2]; returns the table's length (out may be NULL with capacity 0 to ask for it).
int fc_head_dims(int32_t* out, int capacity);

// FA3's append into a KV cache (flash_attn_with_kvcache's k and v; kernel/append.cu): new rows of k and v are
// written into the cache at each sequence's cache_seqlens[b] (+ j for its j-th new row; with cache_leftpad too, as
// FA3), optionally rotating k (and q into q_out) by a rotary table, in one launch on `stream`. 16-bit dtypes;
// strides in elements (last dim contiguous). Every index value read is checked on the device: a bad slot, length,
// offset or rotary position skips the sequence (nothing written, its q_out rows NaN, its seqlens_out -1), a bad page
// id skips that page's rows; the first one is recorded in `errors` (kernel/index_errors.h). No host sync.
typedef struct fc_append_params {
  int32_t dtype;                // FC_FP16 or FC_BF16 (every tensor below)
  int64_t batch, heads_kv, head_dim, head_dim_v;
  // new keys and values: [batch, seqlen_new, Hkv, D] (strides batch, row, head), or packed [total_new, Hkv, D]
  // with cu_seqlens_k_new [batch + 1] (sequence b's rows [cu[b], cu[b + 1]); stride[0] unused)
  const void* k_new;
  const void* v_new;
  int64_t k_new_stride[3];
  int64_t v_new_stride[3];
  int64_t seqlen_new, total_new;
  const int32_t* cu_seqlens_k_new;
  // the cache: contiguous [cache_batch, capacity, Hkv, D] (entry cache_batch_idx[b], default b), or paged
  // [cache_batch pages, page_size, Hkv, D] with page_table [page_table_rows, page_table_stride >= pages per row]
  // (row cache_batch_idx[b], default b; capacity = pages per row * page_size)
  void* k_cache;
  void* v_cache;
  int64_t k_cache_stride[3];  // entry (page), row, head
  int64_t v_cache_stride[3];
  int64_t cache_batch, capacity;
  const int32_t* page_table;
  int64_t page_table_stride, page_table_rows, page_size;
  const int32_t* cache_seqlens;    // [batch]: tokens already in each sequence's cache
  const int32_t* cache_batch_idx;  // [batch] or NULL
  int32_t* seqlens_out;            // [batch] or NULL: cache_seqlens[b] + its new rows (-1 where skipped)
  // rotary (NULL: none): cos and sin [rotary_rows, rotary_dim / 2] (row strides; rotary_dim a multiple of 16,
  // <= head_dim); new key j of sequence b at position rotary_seqlens[b] + j (NULL: cache_seqlens[b] + j)
  const void* rotary_cos;
  const void* rotary_sin;
  int64_t rotary_rows, rotary_dim, rotary_cos_stride, rotary_sin_stride;
  int32_t rotary_interleaved;  // 1: pairs (2i, 2i + 1); 0: (i, i + rotary_dim / 2) (GPT-NeoX)
  const int32_t* rotary_seqlens;
  // q rotary (NULL: none; needs rotary_cos): q [batch, seqlen_q, Hq, D] or packed [total_q, Hq, D] with
  // cu_seqlens_q, rotated into q_out of the same shape; query row i at the first new key's position + i when
  // q_rotary_per_row (FA3: causal or local), else at that position
  const void* q;
  void* q_out;
  int64_t heads_q, seqlen_q, total_q;
  int64_t q_stride[3];
  int64_t q_out_stride[3];
  const int32_t* cu_seqlens_q;
  int32_t q_rotary_per_row;
  int64_t* errors;  // the device error word (4 int64) or NULL
} fc_append_params;
int fc_append_kv(const fc_append_params* params, void* stream);

#ifdef __cplusplus
}
#endif
