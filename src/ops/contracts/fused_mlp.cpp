// Contracts of the fully fused MLP's ops. input: fp32 or fp16 contiguous rows [batch,
// input_width], or with a grid the fp32 coordinates [batch, n_dims] (any row stride).
// output, target and dL_doutput: fp32 [batch, output_width] rows, contiguous or columns of
// a wider matrix (e.g. a branch of a Parallel module). dL_dinput: contiguous fp32 rows
// [batch, input_width]. Empty optional views are skipped.
#include "contract_checks.h"
#include "tessera/core/backend.h"
#include "tessera/ops/fused_mlp.h"
#include "tessera/ops/train_state.h"

namespace tessera::ops {

namespace {
// A fused MLP's fp32 row matrix [batch, width]: each row's values contiguous; rows apart
// (columns of a wider matrix) only where `strided`.
void rows(const char* op, const char* what, const TensorView& v, size_t batch, size_t width, bool strided) {
  if (v.empty()) return;
  TESSERA_CHECK(v.rank == 2 && v.dtype == DType::f32 && v.rows() == batch && v.cols() == width && v.strides[1] == 1,
                "{}: {} must be an fp32 [{}, {}] matrix view, got {} of rank {} [{}, {}]", op, what, batch, width,
                to_string(v.dtype), v.rank, v.rows(), v.cols());
  TESSERA_CHECK(strided || v.contiguous(), "{}: {} must be contiguous rows (its row stride is {} for {} columns)", op,
                what, v.row_stride(), width);
}

// Weights and grid tables: fp16 where the backend's kernels read fp16 (tensor cores),
// else fp16 or fp32 (the CPU reference); contiguous, n elements.
void parameters(const char* op, const char* what, const Stream& stream, const TensorView& v, size_t n) {
  const bool half_only = stream.backend().uses_half_params();
  TESSERA_CHECK(!v.empty() || n == 0, "{}: {}: no data given", op, what);
  TESSERA_CHECK(v.dtype == DType::f16 || (!half_only && v.dtype == DType::f32), "{}: {}: {} data where {} is expected",
                op, what, to_string(v.dtype), half_only ? "f16" : "f16 or f32");
  TESSERA_CHECK(v.numel() >= n && v.contiguous(), "{}: {}: {} elements where {} contiguous ones are needed", op, what,
                v.numel(), n);
}

void shape_supported(const char* op, const MlpShape& s) {
  TESSERA_CHECK(s.input_width >= 1 && s.output_width >= 1, "{}: the network takes {} inputs and gives {} outputs", op,
                s.input_width, s.output_width);
}

void input(const char* op, const Stream& stream, const MlpShape& s, const FusedGridInputViews& grid,
           const TensorView& in) {
  shape_supported(op, s);
  TESSERA_CHECK(in.rank == 2 && (!in.empty() || in.rows() == 0), "{}: the input must be a matrix view [batch, {}]", op,
                grid.layout ? grid.layout->n_dims : s.input_width);
  if (grid.layout) {
    const GridLayout& g = *grid.layout;
    TESSERA_CHECK(g.output_width() == s.input_width, "{}: the grid puts out {} features, the network takes {}", op,
                  g.output_width(), s.input_width);
    parameters(op, "grid table", stream, grid.table, g.n_params());
    return rows(op, "the grid's coordinates", in, in.rows(), g.n_dims, true);
  }
  if (in.dtype == DType::f16) {
    TESSERA_CHECK(in.cols() == s.input_width && in.contiguous(),
                  "{}: an fp16 input must be contiguous rows [batch, {}], got [{}, {}]", op, s.input_width, in.rows(),
                  in.cols());
    return;
  }
  rows(op, "the input", in, in.rows(), s.input_width, false);
}
}  // namespace

void FusedMlpInference::check(Stream& stream, const MlpShape& s, MlpActivations, const TensorView& weights,
                              const TensorView& in, const TensorView& output, const FusedMlpOptions&) {
  input(name, stream, s, {}, in);
  parameters(name, "weights", stream, weights, s.n_params());
  TESSERA_CHECK(!output.empty() || in.rows() == 0, "fused_mlp_inference: no output given");
  rows(name, "the output", output, in.rows(), s.output_width, true);
}

void FusedMlpInferenceGridInput::check(Stream& stream, const MlpShape& s, MlpActivations, const TensorView& weights,
                                       const FusedGridInputViews& grid, const TensorView& coords,
                                       const TensorView& output, const FusedMlpOptions&) {
  TESSERA_CHECK(grid.layout, "fused_mlp_inference_grid_input: no grid layout given");
  input(name, stream, s, grid, coords);
  parameters(name, "weights", stream, weights, s.n_params());
  TESSERA_CHECK(!output.empty() || coords.rows() == 0, "fused_mlp_inference_grid_input: no output given");
  rows(name, "the output", output, coords.rows(), s.output_width, true);
}

void FusedMlpTrain::check(Stream& stream, const MlpShape& s, MlpActivations, const FusedMlpTrainArgs& a,
                          Workspace&) {
  input(name, stream, s, a.grid, a.input);
  parameters(name, "weights", stream, a.weights, s.n_params());
  const size_t batch = a.input.rows();
  TESSERA_CHECK(a.target.empty() != a.dL_doutput.empty(),
                "fused_mlp_train: give exactly one of a target (with a loss) or dL/doutput");
  rows(name, "the target", a.target, batch, s.output_width, true);
  rows(name, "dL/doutput", a.dL_doutput, batch, s.output_width, true);
  rows(name, "the output", a.output, batch, s.output_width, true);
  TESSERA_CHECK(!a.grid.layout || a.dL_dinput.empty(), "fused_mlp_train: no dL/dinput with a grid input");
  rows(name, "dL/dinput", a.dL_dinput, batch, s.input_width, false);
  contract::view(name, "dL_dparams", a.dL_dparams, DType::f32, s.n_params());
  if (a.grid.layout) contract::view(name, "grid gradients", a.grid.gradients, DType::f32, a.grid.layout->n_params());
  contract::train_state(name, a.state);
}

// Queries: any shape may be asked about (the answer says whether the kernel takes it).
void FusedMlpAcceptsHalfInput::check(Stream&, const MlpShape&, MlpActivations, size_t, bool, const FusedMlpOptions&) {}
void FusedMlpAcceptsGridInput::check(Stream&, const MlpShape&, MlpActivations, const GridLayout&, size_t, bool,
                                     const FusedMlpOptions&) {}
void FusedMlpLaunchInfo::check(Stream&, const MlpShape&, MlpActivations, size_t, bool, const FusedMlpOptions&) {}

}  // namespace tessera::ops
