// Standalone driver (no torch): runs the FlashCore kernel on generated inputs for one workload.
// Used by the sanitizer and ncu gates, which must see plain cudaMalloc allocations.
//   build/flashcore_driver --batch 2 --heads-q 4 --heads-kv 4 --seqlen-q 100 --seqlen-k 100
//       --head-dim 64 --dtype bf16|fp16|e4m3 [--causal] [--iters 1] [--seed 1] [--check] [--fault N] [--tol X]
//       [--kernel wgmma|phase1]   (phase1: the mma.sync kernel of phase 1, for comparisons)
//       [--splits N] [--sm-margin N] [--deterministic]   (split-KV: fc_params fields of the same names)
//       [--block-n N] [--schedule 0..3] [--l2-pct N]       (tile configuration: fc_params fields, 0 = default)
//       [--layout dense|varlen|kvcache|paged --seqlens-q a,b,.. --seqlens-k a,b,.. --page-size N]
//       [--seqused-q a,b,..]                                   (varlen: each sequence's used queries, FA3's seqused_q)
//       [--leftpad-k a,b,..]                      (kvcache: each sequence's first key row, FA3's leftpad_k <= seqlens-k)
//       [--window L,R] [--softcap X] [--head-dim-v N]         (serving layouts: harness/schema.py's Workload)
//   varlen: packed sequences of seqlens-q queries and seqlens-k keys (seqlen-q/-k: the longest); kvcache: a cache
//   of seqlen-k slots per sequence holding seqlens-k keys; paged: that cache in pages of page-size keys, stored in a
//   shuffled order behind a page table. Every buffer is its own cudaMalloc of exactly its size (memcheck sees
//   any overrun). --check (the naive kernel, kernel/driver/check.cuh) covers the dense layout with one head dim
//   and no window, softcap or chunks only; it is refused elsewhere (usage error).
//   e4m3: FP8 inputs (dense, head dim 64/128/256) with descale factors [B, Hkv] of 0.5, 1 or 2 (each its own
//   allocation), bf16 output; --check runs the naive kernel on bf16 copies of the dequantized inputs (exact: an E4M3
//   value times a power of two is a bf16 value) and judges the output by FA3's FP8 rule: at most 2x the error of a
//   baseline that rounds P to E4M3 as the kernel does, + 1e-5 (fp8_baseline_err= on the RESULT line; --tol overrides).
//   --fp8-v-transpose auto|pass|smem: fc_params.fp8_v_transpose (where V is transposed; RESULT's fp8_vt= says which).
// Prints one line "RESULT status=ok|fail ..." and exits 0 (ok), 1 (check failed), 2 (bad usage), 3 (error).
//   FLAGS --next FLAGS ...: several workloads in one process, each after a "BEGIN i" line (main says why).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "driver/check.cuh"
#include "driver/inputs.cuh"
#include "flashcore.h"
#include "naive.h"

enum Layout { kDense = 0, kVarlen = 1, kKvcache = 2, kPaged = 3 };

struct Args {
  fc_params p{};
  int iters = 1, seed = 1, check = 0, phase1 = 0, layout = kDense;
  double tol = -1;
  std::vector<int32_t> seqlens_q, seqlens_k, seqused_q, leftpad_k;
};

// "a,b,c" -> {a, b, c}; false on anything but non-negative integers.
bool parse_list(const char* text, std::vector<int32_t>* out) {
  out->clear();
  while (*text) {
    char* end = nullptr;
    const long x = std::strtol(text, &end, 10);
    if (end == text || x < 0 || x > (1L << 30)) return false;
    out->push_back(static_cast<int32_t>(x));
    text = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != 0) return false;
  }
  return !out->empty();
}

// The serving fields must agree with the shape, as harness/schema.py's workload_problems checks them.
bool consistent(const Args& a) {
  const fc_params& p = a.p;
  const auto longest = [](const std::vector<int32_t>& v) { int64_t m = 0; for (int32_t x : v) m = x > m ? x : m;
                                                           return m; };
  if (!a.seqused_q.empty()) {  // varlen only, one count per sequence within its length
    if (a.layout != kVarlen || a.seqused_q.size() != a.seqlens_q.size()) return false;
    for (size_t b = 0; b < a.seqused_q.size(); ++b) if (a.seqused_q[b] > a.seqlens_q[b]) return false;
  }
  if (!a.leftpad_k.empty()) {  // kvcache only (the paged producer takes no offset), within each sequence's keys
    if (a.layout != kKvcache || a.leftpad_k.size() != a.seqlens_k.size()) return false;
    for (size_t b = 0; b < a.leftpad_k.size(); ++b) if (a.leftpad_k[b] > a.seqlens_k[b]) return false;
  }
  // --check's naive kernel covers the dense layout with one head dim, no window, softcap or chunks only.
  const bool plain = p.window == 0 && p.softcap == 0.f && p.attention_chunk == 0 &&
                     (p.head_dim_v == 0 || p.head_dim_v == p.head_dim);
  if (a.check && (a.layout != kDense || !plain)) return false;
  if (a.layout == kDense) return a.seqlens_q.empty() && a.seqlens_k.empty() && p.page_size == 0;
  if (static_cast<int64_t>(a.seqlens_k.size()) != p.batch) return false;
  if (a.layout == kVarlen)
    return static_cast<int64_t>(a.seqlens_q.size()) == p.batch && longest(a.seqlens_q) == p.seqlen_q &&
           longest(a.seqlens_k) == p.seqlen_k && p.page_size == 0;
  if (!a.seqlens_q.empty() || longest(a.seqlens_k) > p.seqlen_k) return false;
  if (a.layout == kPaged) return p.page_size > 0 && p.seqlen_k % p.page_size == 0;
  return p.page_size == 0;
}

int usage(const char* msg) {
  std::fprintf(stderr, "flashcore_driver: %s\n"
               "usage: flashcore_driver --batch B --heads-q H --heads-kv H --seqlen-q S --seqlen-k S --head-dim D\n"
               "       --dtype bf16|fp16|e4m3 [--causal] [--iters N] [--seed N] [--check] [--fault N] [--tol X]\n"
               "       [--kernel wgmma|phase1] [--splits N] [--sm-margin N] [--deterministic]\n"
               "       [--block-n N] [--schedule 0..3] [--l2-pct N]\n"
               "       [--layout dense|varlen|kvcache|paged --seqlens-q a,b,.. --seqlens-k a,b,.. --page-size N]\n"
               "       [--seqused-q a,b,..] [--leftpad-k a,b,..]\n"
               "       [--window L,R] [--softcap X] [--head-dim-v N] [--fp8-v-transpose auto|pass|smem]\n"
               "       [--next FLAGS...]   (another workload in the same process, after this one)\n", msg);
  std::printf("RESULT status=error reason=usage\n");
  return 2;
}

bool parse(int argc, char** argv, Args* a) {
  a->p.dtype = -1;
  for (int i = 1; i < argc; ++i) {
    const char* f = argv[i];
    auto next = [&](int64_t* dst) { if (i + 1 >= argc) return false; *dst = std::atoll(argv[++i]); return true; };
    int64_t tmp = 0;
    if (!std::strcmp(f, "--causal")) a->p.causal = 1;
    else if (!std::strcmp(f, "--check")) a->check = 1;
    else if (!std::strcmp(f, "--deterministic")) a->p.deterministic = 1;
    else if (!std::strcmp(f, "--splits")) { if (!next(&tmp)) return false; a->p.num_splits = static_cast<int32_t>(tmp); }
    else if (!std::strcmp(f, "--sm-margin")) { if (!next(&tmp)) return false; a->p.sm_margin = static_cast<int32_t>(tmp); }
    else if (!std::strcmp(f, "--block-n")) { if (!next(&tmp)) return false; a->p.block_n = static_cast<int32_t>(tmp); }
    else if (!std::strcmp(f, "--schedule")) { if (!next(&tmp)) return false; a->p.schedule = static_cast<int32_t>(tmp); }
    else if (!std::strcmp(f, "--l2-pct")) { if (!next(&tmp)) return false; a->p.l2_section_pct = static_cast<int32_t>(tmp); }
    else if (!std::strcmp(f, "--fp8-v-transpose")) {
      if (i + 1 >= argc) return false;
      const char* m = argv[++i];
      if (!std::strcmp(m, "auto")) a->p.fp8_v_transpose = FC_FP8_VT_AUTO;
      else if (!std::strcmp(m, "pass")) a->p.fp8_v_transpose = FC_FP8_VT_PASS;
      else if (!std::strcmp(m, "smem")) a->p.fp8_v_transpose = FC_FP8_VT_SMEM;
      else return false;
    }
    else if (!std::strcmp(f, "--kernel")) {
      if (i + 1 >= argc) return false;
      const char* k = argv[++i];
      if (!std::strcmp(k, "phase1")) a->phase1 = 1;
      else if (std::strcmp(k, "wgmma") != 0) return false;
    }
    else if (!std::strcmp(f, "--batch")) { if (!next(&a->p.batch)) return false; }
    else if (!std::strcmp(f, "--heads-q")) { if (!next(&a->p.heads_q)) return false; }
    else if (!std::strcmp(f, "--heads-kv")) { if (!next(&a->p.heads_kv)) return false; }
    else if (!std::strcmp(f, "--seqlen-q")) { if (!next(&a->p.seqlen_q)) return false; }
    else if (!std::strcmp(f, "--seqlen-k")) { if (!next(&a->p.seqlen_k)) return false; }
    else if (!std::strcmp(f, "--head-dim")) { if (!next(&a->p.head_dim)) return false; }
    else if (!std::strcmp(f, "--iters")) { if (!next(&tmp)) return false; a->iters = static_cast<int>(tmp); }
    else if (!std::strcmp(f, "--seed")) { if (!next(&tmp)) return false; a->seed = static_cast<int>(tmp); }
    else if (!std::strcmp(f, "--fault")) { if (!next(&tmp)) return false; a->p.debug_fault = static_cast<int>(tmp); }
    else if (!std::strcmp(f, "--tol")) { if (i + 1 >= argc) return false; a->tol = std::atof(argv[++i]); }
    else if (!std::strcmp(f, "--layout")) {
      if (i + 1 >= argc) return false;
      const char* l = argv[++i];
      a->layout = !std::strcmp(l, "dense") ? kDense : !std::strcmp(l, "varlen") ? kVarlen
                : !std::strcmp(l, "kvcache") ? kKvcache : !std::strcmp(l, "paged") ? kPaged : -1;
      if (a->layout < 0) return false;
    }
    else if (!std::strcmp(f, "--seqlens-q")) { if (i + 1 >= argc || !parse_list(argv[++i], &a->seqlens_q)) return false; }
    else if (!std::strcmp(f, "--seqused-q")) { if (i + 1 >= argc || !parse_list(argv[++i], &a->seqused_q)) return false; }
    else if (!std::strcmp(f, "--leftpad-k")) { if (i + 1 >= argc || !parse_list(argv[++i], &a->leftpad_k)) return false; }
    else if (!std::strcmp(f, "--seqlens-k")) { if (i + 1 >= argc || !parse_list(argv[++i], &a->seqlens_k)) return false; }
    else if (!std::strcmp(f, "--page-size")) { if (!next(&a->p.page_size)) return false; }
    else if (!std::strcmp(f, "--head-dim-v")) { if (!next(&a->p.head_dim_v)) return false; }
    else if (!std::strcmp(f, "--softcap")) { if (i + 1 >= argc) return false; a->p.softcap = std::atof(argv[++i]); }
    else if (!std::strcmp(f, "--window")) {
      if (i + 1 >= argc) return false;
      int left = 0, right = 0;
      if (std::sscanf(argv[++i], "%d,%d", &left, &right) != 2) return false;
      a->p.window = 1; a->p.window_left = left; a->p.window_right = right;
    }
    else if (!std::strcmp(f, "--dtype")) {
      if (i + 1 >= argc) return false;
      const char* d = argv[++i];
      a->p.dtype = !std::strcmp(d, "bf16") ? FC_BF16 : !std::strcmp(d, "fp16") ? FC_FP16
                 : !std::strcmp(d, "e4m3") ? FC_E4M3 : -2;
    } else return false;
  }
  const bool serving = a->layout != kDense || a->p.window || a->p.softcap != 0.f || a->p.head_dim_v != 0;
  return a->p.dtype >= 0 && a->iters >= 1 && a->p.batch > 0 && a->p.heads_q > 0 && a->p.heads_kv > 0 &&
         a->p.seqlen_q > 0 && a->p.seqlen_k > 0 && a->p.head_dim > 0 && consistent(*a) &&
         !(a->check && serving) && !(a->phase1 && serving);
}

// Device copy of a host int32 array (its own allocation).
int32_t* to_device(const std::vector<int32_t>& host) {
  int32_t* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, host.size() * sizeof(int32_t)));
  CUDA_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  return d;
}

std::vector<int32_t> offsets(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu(1, 0);
  for (int32_t x : lengths) cu.push_back(cu.back() + x);
  return cu;
}

// The index arrays of a serving layout (fc_params' pointers into them; freed by the caller via `owned`), and the
// rows of q and of k/v the buffers need.
void serving_arrays(Args* a, int64_t* rows_q, int64_t* rows_k, std::vector<int32_t*>* owned) {
  fc_params& p = a->p;
  *rows_q = p.batch * p.seqlen_q;
  *rows_k = p.batch * p.seqlen_k;
  if (a->layout == kVarlen) {
    const std::vector<int32_t> cu_q = offsets(a->seqlens_q), cu_k = offsets(a->seqlens_k);
    *rows_q = p.total_q = cu_q.back();
    *rows_k = p.total_k = cu_k.back();
    owned->push_back(to_device(cu_q)); p.cu_seqlens_q = owned->back();
    owned->push_back(to_device(cu_k)); p.cu_seqlens_k = owned->back();
    if (!a->seqused_q.empty()) { owned->push_back(to_device(a->seqused_q)); p.seqused_q = owned->back(); }
  } else if (a->layout != kDense) {
    owned->push_back(to_device(a->seqlens_k)); p.seqused_k = owned->back();
    if (!a->leftpad_k.empty()) { owned->push_back(to_device(a->leftpad_k)); p.leftpad_k = owned->back(); }
  }
  if (a->layout == kPaged) {
    const int64_t per = p.seqlen_k / p.page_size, pages = p.batch * per;
    std::vector<int32_t> table(pages);
    for (int64_t i = 0; i < pages; ++i) table[i] = static_cast<int32_t>(i);
    uint32_t h = 2654435761u * static_cast<uint32_t>(a->seed) + 1u;  // a seeded Fisher-Yates shuffle
    for (int64_t i = pages - 1; i > 0; --i) {
      h = h * 1664525u + 1013904223u;
      std::swap(table[i], table[h % static_cast<uint32_t>(i + 1)]);
    }
    owned->push_back(to_device(table)); p.page_table = owned->back();
    p.page_table_stride = per;
    p.kv_batch = pages;
  }
}

// ----------------------------------------------------------------------------------------------
Buffers make_buffers(Args* a, int64_t rows_q, int64_t rows_k) {
  fc_params& p = a->p;
  Buffers b;
  const int64_t D = p.head_dim, Dv = p.head_dim_v ? p.head_dim_v : p.head_dim;
  // Rows of k/v per batch entry: a sequence's cache slots (dense, kvcache), a page (paged); varlen: unused.
  const int64_t per_entry = a->layout == kPaged ? p.page_size : p.seqlen_k;
  b.counts[0] = rows_q * p.heads_q * D;
  b.counts[1] = rows_k * p.heads_kv * D;
  b.counts[2] = rows_k * p.heads_kv * Dv;
  b.no = rows_q * p.heads_q * Dv;
  b.nlse = a->layout == kVarlen ? p.heads_q * rows_q : p.batch * p.heads_q * p.seqlen_q;
  const bool fp8 = p.dtype == FC_E4M3;
  const int64_t eb = fp8 ? 1 : 2;  // input element bytes; the output is 16-bit (bf16 for FP8)
  for (int i = 0; i < 3; ++i) {
    CUDA_CHECK(cudaMalloc(&b.in[i], b.counts[i] * eb));
    const uint32_t seed = 3 * a->seed + i;
    if (fp8) fill_random_e4m3<<<1024, 256>>>(static_cast<uint8_t*>(b.in[i]), b.counts[i], seed);
    else fill_random<<<1024, 256>>>(static_cast<uint16_t*>(b.in[i]), b.counts[i], seed, p.dtype);
  }
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaMalloc(&b.o, b.no * 2));
  CUDA_CHECK(cudaMalloc(&b.lse, b.nlse * 4));
  if (fp8) {  // 0.5, 1 or 2 per (batch, K/V head), one allocation each so memcheck sees an overrun of any
    std::vector<float> host(p.batch * p.heads_kv);
    for (int i = 0; i < 3; ++i) {
      for (size_t j = 0; j < host.size(); ++j) host[j] = std::ldexp(1.f, static_cast<int>((j + i + a->seed) % 3) - 1);
      CUDA_CHECK(cudaMalloc(&b.descales[i], host.size() * sizeof(float)));
      CUDA_CHECK(cudaMemcpy(b.descales[i], host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    p.q_descale = b.descales[0]; p.k_descale = b.descales[1]; p.v_descale = b.descales[2];
    const int64_t ds[2] = {p.heads_kv, 1};
    std::memcpy(p.q_descale_stride, ds, sizeof ds); std::memcpy(p.k_descale_stride, ds, sizeof ds);
    std::memcpy(p.v_descale_stride, ds, sizeof ds);
  }
  CUDA_CHECK(cudaMemset(b.o, 0xFF, b.no * 2));  // poison: 0xFFFF is NaN in fp16 and bf16
  CUDA_CHECK(cudaMemset(b.lse, 0xFF, b.nlse * 4));
  p.q = b.in[0]; p.k = b.in[1]; p.v = b.in[2]; p.o = b.o; p.lse = b.lse;
  const int64_t qs[3] = {p.seqlen_q * p.heads_q * D, p.heads_q * D, D};
  const int64_t os[3] = {p.seqlen_q * p.heads_q * Dv, p.heads_q * Dv, Dv};
  const int64_t ks[3] = {per_entry * p.heads_kv * D, p.heads_kv * D, D};
  const int64_t vs[3] = {per_entry * p.heads_kv * Dv, p.heads_kv * Dv, Dv};
  std::memcpy(p.q_stride, qs, sizeof qs); std::memcpy(p.o_stride, os, sizeof os);
  std::memcpy(p.k_stride, ks, sizeof ks); std::memcpy(p.v_stride, vs, sizeof vs);
  p.softmax_scale = 1.f / std::sqrt(static_cast<float>(D));
  return b;
}

// FLOPs of the call: (query, key) pairs before masking, sequence by sequence (causal halves them).
double call_flops(const Args& a) {
  const fc_params& p = a.p;
  const int64_t D = p.head_dim, Dv = p.head_dim_v ? p.head_dim_v : p.head_dim;
  double pairs = 0.0;
  for (int64_t b = 0; b < p.batch; ++b)
    pairs += static_cast<double>(a.layout != kVarlen ? p.seqlen_q : !a.seqused_q.empty() ? a.seqused_q[b]
                                                                                          : a.seqlens_q[b]) *
             (a.layout == kDense ? p.seqlen_k : a.seqlens_k[b] - (a.leftpad_k.empty() ? 0 : a.leftpad_k[b]));
  return 2.0 * p.heads_q * pairs * (D + Dv) / (p.causal ? 2.0 : 1.0);
}

// Prints the failure's RESULT line and returns the exit code of an error.
int fail(const char* reason) {
  std::fprintf(stderr, "flashcore_driver: %s\n", fc_last_error());
  std::printf("RESULT status=error reason=%s\n", reason);
  return 3;
}

// One workload: argv[1..argc) are its flags (argv[0] is never read). Returns the process exit code it asks for.
int run_workload(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, &a)) return usage("bad or missing arguments");
  fc_params& p = a.p;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (!fc_device_supported(device)) return fail("device");
  std::vector<int32_t*> owned;
  int64_t rows_q = 0, rows_k = 0;
  serving_arrays(&a, &rows_q, &rows_k, &owned);
  const Buffers bufs = make_buffers(&a, rows_q, rows_k);
  fc_plan_info plan{};
  if (fc_plan(&p, &plan) != FC_OK) return fail("plan");
  void* workspace = nullptr;
  if (plan.workspace_bytes > 0) CUDA_CHECK(cudaMalloc(&workspace, plan.workspace_bytes));
  p.workspace = workspace;
  p.workspace_bytes = plan.workspace_bytes;

  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start));
  for (int it = 0; it < a.iters; ++it) {
    const int status = a.phase1 ? fc_attention_forward_phase1(&p, nullptr) : fc_attention_forward(&p, nullptr);
    if (status != FC_OK) return fail("launch");
  }
  CUDA_CHECK(cudaEventRecord(stop));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  const double ms_per_iter = ms / a.iters;
  const CheckResult r = a.check ? check_outputs(p, a.tol, bufs) : CheckResult{};
  const bool fp8 = p.dtype == FC_E4M3;
  std::printf("RESULT status=%s max_abs_err=%.6g max_lse_err=%.3g nonfinite=%lld ms_per_iter=%.6f tflops=%.2f "
              "splits=%d ctas=%lld", r.ok ? "ok" : "fail", r.max_err, r.max_lse_err,
              static_cast<long long>(r.nonfinite), ms_per_iter, call_flops(a) / (ms_per_iter * 1e-3) / 1e12,
              plan.num_splits, static_cast<long long>(plan.ctas));
  if (plan.tail_tiles > 0) std::printf(" tail=%d/%d", plan.tail_tiles, plan.tail_pieces);  // tiles / pieces
  if (fp8) std::printf(" fp8_vt=%s", plan.fp8_v_transpose == FC_FP8_VT_SMEM ? "smem" : "pass");
  if (fp8 && a.check) std::printf(" fp8_baseline_err=%.6g", r.base_err);
  std::printf("\n");
  if (workspace != nullptr) CUDA_CHECK(cudaFree(workspace));
  free_buffers(bufs);
  for (int32_t* d : owned) CUDA_CHECK(cudaFree(d));
  CUDA_CHECK(cudaEventDestroy(start)); CUDA_CHECK(cudaEventDestroy(stop));
  return r.ok ? 0 : 1;
}

// Workloads separated by --next run one after another in this process: a compute-sanitizer run pays its start
// (the tool's attach, the context, the module's instrumentation) once for all of them. Each prints "BEGIN i" before
// and its RESULT line after it, flushed, so the tool's reports fall between the lines of the workload they belong
// to. Every workload frees what it allocated, so none sees another's memory. The exit code is the first non-zero
// one; a workload that fails stops the series (a later one could run on a broken context).
int main(int argc, char** argv) {
  const bool series = std::any_of(argv + 1, argv + argc, [](const char* a) { return !std::strcmp(a, "--next"); });
  std::vector<char*> group(1, argv[0]);
  int at = 0;
  for (int i = 1; i <= argc; ++i) {
    if (i < argc && std::strcmp(argv[i], "--next") != 0) { group.push_back(argv[i]); continue; }
    if (series) std::printf("BEGIN %d\n", at);
    std::fflush(stdout);
    const int rc = run_workload(static_cast<int>(group.size()), group.data());
    std::fflush(stdout);
    if (rc != 0) return rc;
    group.resize(1);
    ++at;
  }
  return 0;
}
