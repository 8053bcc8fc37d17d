// The checks the op contracts share.
#include "contract_checks.h"

#include "tessera/ops/nerf_types.h"
#include "tessera/ops/train_state.h"

namespace tessera::ops::contract {

// The message is formatted only when a check fails: every op call runs these.
void view(const char* op, const char* what, const TensorView& v, DType dtype, size_t min_elements) {
  TESSERA_CHECK(!v.empty() || min_elements == 0, "{}: {}: no data given", op, what);
  if (v.empty()) return;
  TESSERA_CHECK(v.dtype == dtype, "{}: {}: {} data where {} is expected", op, what, to_string(v.dtype),
                to_string(dtype));
  TESSERA_CHECK(v.numel() >= min_elements, "{}: {}: {} elements where {} are needed", op, what, v.numel(),
                min_elements);
}

void optional_view(const char* op, const char* what, const TensorView& v, DType dtype, size_t min_elements) {
  if (!v.empty()) view(op, what, v, dtype, min_elements);
}

void matrix(const char* op, const char* what, const TensorView& v, DType dtype, size_t rows, size_t cols) {
  TESSERA_CHECK(v.rank == 2 && v.dtype == dtype && v.strides[1] == 1,
                "{}: {} must be a {} matrix view with contiguous rows, got {} of rank {}", op, what, to_string(dtype),
                to_string(v.dtype), v.rank);
  TESSERA_CHECK(v.rows() == rows && v.cols() == cols, "{}: {} is {}x{}, expected {}x{}", op, what, v.rows(), v.cols(),
                rows, cols);
}

void train_state(const char* op, const TensorView& state) {
  TESSERA_CHECK(state.bytes() >= sizeof(TrainState), "{}: the state view holds no TrainState ({} bytes)", op,
                state.bytes());
}

void encoding_views(const char* op, uint32_t in_width, uint32_t out_width, const TensorView& in,
                    const TensorView& out, DType out_dtype) {
  TESSERA_CHECK(in.rank == 2 && out.rank == 2, "{}: input and output must be matrix views", op);
  TESSERA_CHECK(in.dtype == DType::f32, "{}: the input is {}, not fp32", op, to_string(in.dtype));
  TESSERA_CHECK(out.dtype == out_dtype, "{}: the output is {}, not {}", op, to_string(out.dtype),
                to_string(out_dtype));
  TESSERA_CHECK(in.cols() >= in_width, "{}: the input has {} columns, the encoding reads {}", op, in.cols(),
                in_width);
  TESSERA_CHECK(out.cols() == out_width, "{}: the output has {} columns, the encoding writes {}", op, out.cols(),
                out_width);
  TESSERA_CHECK(in.rows() == out.rows(), "{}: {} input rows but {} output rows", op, in.rows(), out.rows());
  TESSERA_CHECK(in.strides[1] == 1 && out.strides[1] == 1, "{}: rows must be contiguous", op);
}

void nerf_rays(const char* op, const TensorView& rays, uint32_t n_rays) {
  view(op, "rays", rays, DType::u8, size_t(n_rays) * sizeof(NerfRay));
}

void nerf_sample_rows(const char* op, const char* what, const TensorView& v) {
  TESSERA_CHECK(v.rank == 2 && v.cols() >= kNerfInputWidth && v.contiguous() && v.dtype == DType::f32,
                "{}: {} must be a contiguous fp32 [rows, {} + embedding width] matrix", op, what, kNerfInputWidth);
}

}  // namespace tessera::ops::contract
