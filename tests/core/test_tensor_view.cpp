// TensorView: slicing moves the offset (never the handle), shapes and types are checked,
// and an op given a wrong view says which argument is wrong.
#include <gtest/gtest.h>

#include <vector>

#include "support/errors.h"
#include "support/views.h"
#include "tessera/core/buffer.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/matrix.h"

namespace tessera {
namespace {

TEST(TensorView, SlicesMoveTheOffsetNotTheHandle) {
  std::vector<float> host(6 * 10);
  const TensorView m = TensorView::of_matrix(host.data(), 6, 8, 10);
  const TensorView block = m.rows(2, 3).columns(4, 4);
  EXPECT_EQ(block.memory, m.memory);  // an OpenCL cl_mem stays the same handle
  EXPECT_EQ(block.offset, 2u * 10 + 4);
  EXPECT_EQ(block.rows(), 3u);
  EXPECT_EQ(block.cols(), 4u);
  EXPECT_EQ(block.row_stride(), 10u);
  EXPECT_FALSE(block.contiguous());
  EXPECT_TRUE(m.rows(1, 2).columns(0, 8).rows(0, 1).contiguous());
  EXPECT_EQ(block.data<float>(), host.data() + 24);
  EXPECT_EQ(block.numel(), 12u);
  EXPECT_EQ(block.bytes(), 48u);
}

TEST(TensorView, ChecksTypesAndExtents) {
  std::vector<float> host(8);
  const TensorView v = test::test_view(host);
  EXPECT_NE(test::error_of([&] { (void)v.data<uint32_t>(); }).find("fp32 view read as u32"), std::string::npos);
  EXPECT_NE(test::error_of([&] { (void)v.slice(0, 6, 3); }).find("outside its extent 8"), std::string::npos);
  EXPECT_NE(test::error_of([&] { (void)v.as(DType::f16); }).find("cannot be read as fp16"), std::string::npos);
  std::vector<uint16_t> half(4);
  const TensorView h = test::test_view(half).as(DType::bf16);
  EXPECT_EQ(h.data<uint16_t>(), half.data());  // bf16 bits read as uint16_t
  EXPECT_TRUE(TensorView().empty());
  EXPECT_EQ(TensorView().data<float>(), nullptr);
}

TEST(TensorView, BufferViewsAndStructs) {
  Buffer<float> b(DeviceKind::cpu, 12);
  EXPECT_EQ(b.view(4, 8).offset, 4u);
  EXPECT_EQ(b.matrix(3, 4).row_stride(), 4u);
  EXPECT_NE(test::error_of([&] { (void)b.view(10, 3); }).find("view [10, 13) of a buffer of 12"), std::string::npos);
  struct Pair {
    uint32_t a, b;
  };
  Buffer<Pair> pairs(DeviceKind::cpu, 3);
  const TensorView p = pairs.view(1, 2);
  EXPECT_EQ(p.dtype, DType::u8);
  EXPECT_EQ(p.bytes(), 2 * sizeof(Pair));
  EXPECT_EQ(p.data<Pair>(), pairs.data() + 1);
}

TEST(TensorView, OpsNameTheWrongArgument) {
  std::vector<float> A(12), x(3), y(4);
  const TensorView a = TensorView::of_matrix(A.data(), 4, 3, 3);
  std::string msg = test::error_of([&] {
    ops::call<ops::Gemv>(DeviceKind::cpu, ops::GemvOp::T, 1.0f, a, test::test_view(x), 0.0f, test::test_view(y),
                         Activation::None);
  });
  EXPECT_NE(msg.find("gemv: x: 3 elements where 4 are needed"), std::string::npos) << msg;
  std::vector<uint16_t> half(3);
  msg = test::error_of([&] {
    ops::call<ops::Gemv>(DeviceKind::cpu, ops::GemvOp::N, 1.0f, a, test::test_view(half), 0.0f, test::test_view(y),
                         Activation::None);
  });
  EXPECT_NE(msg.find("gemv: x: fp16 data where fp32 is expected"), std::string::npos) << msg;
  msg = test::error_of([&] {
    ops::call<ops::MatrixAxpby>(DeviceKind::cpu, 1.0f, a.columns(0, 2), 0.0f, a);
  });
  EXPECT_NE(msg.find("matrix_axpby: src is 4x2, expected 4x3"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tessera
