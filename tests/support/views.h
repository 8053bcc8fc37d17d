#pragma once
// Views of host vectors for tests that run on the CPU backend (whose views are host
// addresses): test_view(v, rows, cols) is v as a contiguous [rows, cols] matrix.
#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::test {

template <typename T>
TensorView test_view(const std::vector<T>& v, size_t rows, size_t cols) {
  return TensorView::of_matrix(const_cast<T*>(v.data()), rows, cols, cols);
}
template <typename T>
TensorView test_view(const std::vector<T>& v) {
  return TensorView::of(const_cast<T*>(v.data()), v.size());
}

}  // namespace tessera::test

namespace tessera::test {
// A [rows, cols] matrix (row stride `stride`, default cols) at a host or device address.
template <typename T>
TensorView ptr_view(T* data, size_t rows, size_t cols, size_t stride = 0) {
  return TensorView::of_matrix(data, rows, cols, stride ? stride : cols);
}
}  // namespace tessera::test

namespace tessera::test {
// A network's input / output rows at `data` (null: the empty view), for a batch.
template <typename Net, typename T>
TensorView in_view(Net& net, T* data, size_t batch) {
  return data ? ptr_view(data, batch, net.input_width()) : TensorView();
}
template <typename Net, typename T>
TensorView out_view(Net& net, T* data, size_t batch) {
  return data ? ptr_view(data, batch, net.output_width()) : TensorView();
}
template <typename Net>
TensorView in_view(Net&, std::nullptr_t, size_t) { return TensorView(); }
template <typename Net>
TensorView out_view(Net&, std::nullptr_t, size_t) { return TensorView(); }
}  // namespace tessera::test

namespace tessera::test {
// sum_i w_i * y_i for y = m.inference(x) on the CPU, batch rows: a scalar loss whose
// gradient with respect to the output is w (the finite-difference checks' probe).
template <typename M>
double weighted_sum(M& m, const std::vector<float>& x, size_t batch, const std::vector<float>& w) {
  std::vector<float> y(batch * m.output_width());
  m.inference(ptr_view(x.data(), batch, m.input_width()), ptr_view(y.data(), batch, m.output_width()));
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += double(w[i]) * y[i];
  return s;
}
}  // namespace tessera::test
