// GEMM dispatcher: argument checks, operand strides, kernel choice, split-K.
#include <algorithm>

#include "device_attributes.h"
#include "gemm_internal.h"
#include "tessera/core/backend.h"
#include "core/cuda/cuda_check.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {

namespace {
// Scratch (split-K partials, packed operands) comes from the stream's workspace: work on
// one stream runs in order, so a later product cannot overwrite scratch an earlier one
// still reads, and products on two streams never share it.
char* split_k_workspace(Stream& s, size_t bytes) { return static_cast<char*>(s.workspace().get("gemm.split_k", bytes)); }
char* pack_workspace(Stream& s, size_t bytes) { return static_cast<char*>(s.workspace().get("gemm.pack", bytes)); }

detail::GemmParams make_params(const GemmDesc& d, const void* A, const void* B, void* C) {
  detail::GemmParams p{};
  p.A = A, p.B = B, p.C = C;
  p.M = int64_t(d.M), p.N = int64_t(d.N), p.K = int64_t(d.K), p.batch = int64_t(d.batch);
  const OperandStrides sa = operand_strides(d.a), sb = operand_strides(d.b), sc = operand_strides(d.c);
  p.a_row_stride = sa.row, p.a_col_stride = sa.col;
  p.b_row_stride = sb.row, p.b_col_stride = sb.col;
  p.c_row_stride = sc.row, p.c_col_stride = sc.col;
  p.stride_a = d.a.batch_stride, p.stride_b = d.b.batch_stride, p.stride_c = d.c.batch_stride;
  p.alpha = d.alpha, p.beta = d.beta;
  const size_t e = dtype_size(d.a.type);
  auto vec_ok = [&](const void* base, size_t ld, int64_t batch_stride) {
    return reinterpret_cast<uintptr_t>(base) % 16 == 0 && (ld * e) % 16 == 0 && (batch_stride * int64_t(e)) % 16 == 0;
  };
  p.a_vec = vec_ok(A, d.a.ld, d.a.batch_stride);
  p.b_vec = vec_ok(B, d.b.ld, d.b.batch_stride);
  // K == 0 leaves C = beta * C: the kernels' K loops are then empty.
  p.splits = 1, p.k_split = p.K, p.partials = nullptr;
  return p;
}

// Split K when the output tiles cannot fill the GPU (small or skinny products), each split
// keeping at least `min_depth_tiles` of the kernel's K tiles. The WMMA kernel aims at one
// block per SM (rounding up: two per SM made 1000^3 slower, 0.048 -> 0.054 ms on the H100;
// 777x333x1999 went 0.135 -> 0.050 ms). The wgmma kernel is fast enough per block that the
// partials' traffic weighs more: it never exceeds one wave and keeps 8 K tiles per split,
// but may use every SM (a 128 x 128 x 2^20 weight gradient is one output tile).
void plan_split_k(detail::GemmParams& p, int64_t tile_m, int64_t tile_n, int64_t depth, int64_t min_depth_tiles,
                  bool round_up, int64_t max_split_count) {
  const int64_t tiles = ((p.M + tile_m - 1) / tile_m) * ((p.N + tile_n - 1) / tile_n) * p.batch;
  const int64_t sms = detail::sm_count();
  const int64_t want = round_up ? (sms + tiles - 1) / tiles : sms / tiles;
  const int64_t max_splits = std::max<int64_t>(1, p.K / (min_depth_tiles * depth));
  const int64_t splits = std::min<int64_t>({want, max_splits, max_split_count});
  if (splits <= 1) return;
  p.k_split = ((p.K + splits - 1) / splits + depth - 1) / depth * depth;
  p.splits = int((p.K + p.k_split - 1) / p.k_split);
}

// Runs `launch` directly, or into split-K partials that a second kernel sums.
template <typename Launch>
void run_with_splits(Stream& s, detail::GemmParams& p, DType out, Launch&& launch) {
  if (p.splits <= 1) {
    launch(p);
    return;
  }
  p.partials =
      reinterpret_cast<float*>(split_k_workspace(s, size_t(p.splits) * size_t(p.M * p.N * p.batch) * sizeof(float)));
  launch(p);
  detail::launch_split_k_reduce(p, out);
}

#ifdef TESSERA_HAS_WGMMA
// Copies the operands TMA cannot read in place (misaligned base, leading dimension or
// batch stride) into dense aligned scratch and points p at the copies.
void pack_for_tma(Stream& s, detail::GemmParams& p) {
  // Each operand as lines of `inner` contiguous elements; K-major when K is contiguous.
  const bool a_k_major = p.a_col_stride == 1, b_k_major = p.b_row_stride == 1;
  const bool pack_a = !detail::wgmma_operand_ok(p.A, p.a_row_stride, p.a_col_stride, p.stride_a, p.batch);
  const bool pack_b = !detail::wgmma_operand_ok(p.B, p.b_row_stride, p.b_col_stride, p.stride_b, p.batch);
  if (!pack_a && !pack_b) return;
  const int64_t a_inner = a_k_major ? p.K : p.M, a_outer = a_k_major ? p.M : p.K;
  const int64_t b_inner = b_k_major ? p.K : p.N, b_outer = b_k_major ? p.N : p.K;
  auto bytes_of = [&](int64_t inner, int64_t outer) { return (detail::packed_ld(inner) * outer * p.batch * 2 + 255) / 256 * 256; };
  const size_t a_bytes = pack_a ? bytes_of(a_inner, a_outer) : 0;
  const size_t b_bytes = pack_b ? bytes_of(b_inner, b_outer) : 0;
  char* scratch = pack_workspace(s, a_bytes + b_bytes);
  detail::PackJob jobs[2];
  int count = 0;
  if (pack_a) {
    const size_t ld = a_k_major ? p.a_row_stride : p.a_col_stride, new_ld = detail::packed_ld(a_inner);
    jobs[count++] = {p.A, scratch, a_inner, a_outer, p.batch, ld, p.stride_a};
    p.A = scratch;
    p.stride_a = int64_t(new_ld) * a_outer;
    if (a_k_major) p.a_row_stride = new_ld, p.a_col_stride = 1;
    else p.a_col_stride = new_ld, p.a_row_stride = 1;
  }
  if (pack_b) {
    const size_t ld = b_k_major ? p.b_col_stride : p.b_row_stride, new_ld = detail::packed_ld(b_inner);
    jobs[count++] = {p.B, scratch + a_bytes, b_inner, b_outer, p.batch, ld, p.stride_b};
    p.B = scratch + a_bytes;
    p.stride_b = int64_t(new_ld) * b_outer;
    if (b_k_major) p.b_col_stride = new_ld, p.b_row_stride = 1;
    else p.b_row_stride = new_ld, p.b_col_stride = 1;
  }
  detail::launch_pack_operands(jobs, count, p.stream);
}
#endif

// Why this GPU cannot run `kernel` on `d` (its compute capability), or nullptr.
const char* device_cannot_run(GemmKernel kernel, const GemmDesc& d) {
  if (kernel == GemmKernel::tf32x3 && detail::compute_capability() < 80)
    return "the tf32x3 kernel needs a compute capability 8.0 or later GPU";
  if (kernel == GemmKernel::wmma && d.a.type == DType::bf16 && detail::compute_capability() < 80)
    return "bf16 tensor-core products need a compute capability 8.0 or later GPU";
  return nullptr;
}

// Why `kernel` cannot run `d` here, or nullptr when it can.
const char* cannot_run(GemmKernel kernel, const GemmDesc& d, const detail::GemmParams& p) {
  const bool half_inputs = d.a.type == DType::f16 || d.a.type == DType::bf16;
  switch (kernel) {
    case GemmKernel::simt:
      return d.a.type == DType::f32 ? nullptr : "the simt kernel takes fp32 inputs only";
    case GemmKernel::tf32x3:
      if (d.a.type != DType::f32) return "the tf32x3 kernel takes fp32 inputs only";
      if (d.c.type != DType::f32) return "the tf32x3 kernel writes fp32 C only";
      return device_cannot_run(kernel, d);
    case GemmKernel::wmma:
      if (!half_inputs) return "the wmma kernel takes fp16 or bf16 inputs only";
      return device_cannot_run(kernel, d);
    case GemmKernel::wgmma:
#ifdef TESSERA_HAS_WGMMA
      if (!half_inputs) return "the wgmma kernel takes fp16 or bf16 inputs only";
      (void)p;
      if (!detail::wgmma_gemm_available()) return "the wgmma kernel needs a compute capability 9.0 (Hopper) GPU";
      return nullptr;
#else
      return "this build has no wgmma kernel (it needs sm_90 in TESSERA_CUDA_ARCHS)";
#endif
  }
  return "unknown kernel";
}

void check_dimensions(const GemmDesc& d) {
  TESSERA_CHECK(d.M < (1u << 31) && d.N < (1u << 31) && d.K < (1u << 31) && d.batch <= 65535,
                "gemm: dimensions beyond 2^31 or more than 65535 batch entries are not supported");
}
}  // namespace

const char* to_string(GemmKernel k) {
  switch (k) {
    case GemmKernel::simt: return "simt";
    case GemmKernel::wmma: return "wmma";
    case GemmKernel::wgmma: return "wgmma";
    case GemmKernel::tf32x3: return "tf32x3";
  }
  return "?";
}

bool gemm_kernel_can_run(GemmKernel kernel, const GemmDesc& d, const void* A, const void* B) {
  check_gemm(d);
  return cannot_run(kernel, d, make_params(d, A, B, nullptr)) == nullptr;
}

GemmKernel gemm_kernel_for(const GemmDesc& d, const void* A, const void* B) {
  if (d.a.type == DType::f32) return GemmKernel::simt;
  return gemm_kernel_can_run(GemmKernel::wgmma, d, A, B) ? GemmKernel::wgmma : GemmKernel::wmma;
}

namespace {
// The wgmma plan of a product: operands packed for TMA where needed, tile width, split-K.
struct WgmmaPlan {
  detail::GemmParams p;
  int tile_n = 128;
};
#ifdef TESSERA_HAS_WGMMA
// epilogue: the kernel's epilogue variants exist for 128-wide tiles only.
WgmmaPlan plan_wgmma(Stream* stream, const GemmDesc& d, const void* A, const void* B, void* C, bool epilogue) {
  WgmmaPlan plan{make_params(d, A, B, C)};
  if (stream) {
    plan.p.stream = static_cast<cudaStream_t>(stream->native());
    pack_for_tma(*stream, plan.p);
  }
  plan.tile_n = epilogue ? 128 : detail::wgmma_gemm_tile_n(plan.p);
  plan_split_k(plan.p, 128, plan.tile_n, 64, 8, false, detail::sm_count());
  return plan;
}

// The wgmma kernel applies the epilogue itself for a K-major A (after packing: packing
// keeps the direction), C of the input type, and no split-K.
bool epilogue_fuses(const GemmDesc& d, const detail::GemmParams& planned) {
  return planned.splits == 1 && planned.a_col_stride == 1 && d.c.type == d.a.type;
}
#endif
}  // namespace

void gemm(Stream& stream, const GemmDesc& d, const void* A, const void* B, void* C, GemmKernel kernel) {
  check_gemm(d);
  if (d.M == 0 || d.N == 0) return;
  TESSERA_CHECK(A && B && C, "gemm: null pointer argument");
  check_dimensions(d);
  detail::GemmParams p = make_params(d, A, B, C);
  p.stream = static_cast<cudaStream_t>(stream.native());
  if (const char* why = cannot_run(kernel, d, p)) {
    if (why == device_cannot_run(kernel, d))  // the GPU's limit, not the call's
      throw DeviceLimitError(format_message("gemm on {}: {}", detail::current_attributes().name, why));
    throw Error(format_message("gemm: {}", why));
  }
  switch (kernel) {
    case GemmKernel::simt:
      detail::launch_simt_gemm(p);
      return;
    case GemmKernel::tf32x3:
      detail::launch_tf32x3_gemm(p);
      return;
    case GemmKernel::wmma: {
      plan_split_k(p, 128, 128, 32, 4, true, 32);
      run_with_splits(stream, p, d.c.type, [&](const detail::GemmParams& q) { detail::launch_wmma_gemm(q, d.a.type, d.c.type); });
      return;
    }
    case GemmKernel::wgmma: {
#ifdef TESSERA_HAS_WGMMA
      WgmmaPlan plan = plan_wgmma(&stream, d, A, B, C, false);
      run_with_splits(stream, plan.p, d.c.type, [&](const detail::GemmParams& q) {
        detail::launch_wgmma_gemm(q, d.a.type, d.c.type, plan.tile_n);
      });
#endif
      return;
    }
  }
}


bool gemm_activation_is_fused(const GemmDesc& d, const GemmEpilogue&, const void* A, const void* B) {
  check_gemm(d);
#ifdef TESSERA_HAS_WGMMA
  if (!gemm_kernel_can_run(GemmKernel::wgmma, d, A, B)) return false;
  return epilogue_fuses(d, plan_wgmma(nullptr, d, A, B, nullptr, true).p);
#else
  (void)A, (void)B;
  return false;
#endif
}

void gemm_activation(Stream& stream, const GemmDesc& d, const GemmEpilogue& e, const void* A, const void* B, void* C,
                     const void* Y) {
  check_gemm(d);
  TESSERA_CHECK(d.beta == 0.0f, "gemm_activation: beta must be 0, not {}", d.beta);
  TESSERA_CHECK(!activation_needs_input(e.act), "gemm_activation: {} needs its input for the derivative",
                to_string(e.act));
  if (d.M == 0 || d.N == 0) return;
  TESSERA_CHECK(A && B && C && (Y || e.kind == GemmEpilogueKind::activation), "gemm_activation: null pointer argument");
  check_dimensions(d);
  const int mode = e.kind == GemmEpilogueKind::activation ? 1 : 2;
#ifdef TESSERA_HAS_WGMMA
  if (gemm_kernel_can_run(GemmKernel::wgmma, d, A, B)) {
    WgmmaPlan plan = plan_wgmma(&stream, d, A, B, C, true);
    if (epilogue_fuses(d, plan.p)) {
      plan.p.epilogue = mode, plan.p.act = e.act, plan.p.Y = Y;
      detail::launch_wgmma_gemm(plan.p, d.a.type, d.c.type, plan.tile_n);
      return;
    }
  }
#endif
  // Unfused: the product in fp32 scratch (row-major, dense), then one epilogue pass.
  GemmDesc scratch_desc = d;
  scratch_desc.c = {DType::f32, Layout::row_major, false, d.N, int64_t(d.M * d.N)};
  float* scratch = reinterpret_cast<float*>(
      stream.workspace().get("gemm.epilogue", d.M * d.N * d.batch * sizeof(float)));
  gemm(stream, scratch_desc, A, B, scratch);
  detail::GemmParams p = make_params(d, A, B, C);
  p.stream = static_cast<cudaStream_t>(stream.native());
  p.epilogue = mode, p.act = e.act, p.Y = Y;
  detail::launch_gemm_epilogue(p, scratch, d.c.type);
}

void gemm(Stream& stream, const GemmDesc& d, const void* A, const void* B, void* C) {
  check_gemm(d);
  if (d.M == 0 || d.N == 0) return;
  gemm(stream, d, A, B, C, gemm_kernel_for(d, A, B));
}

void gemm(const GemmDesc& d, const void* A, const void* B, void* C, GemmKernel kernel) {
  gemm(backend_for(DeviceKind::cuda).default_stream(), d, A, B, C, kernel);
}

void gemm(const GemmDesc& d, const void* A, const void* B, void* C) {
  gemm(backend_for(DeviceKind::cuda).default_stream(), d, A, B, C);
}

}  // namespace tessera::ops::cuda
