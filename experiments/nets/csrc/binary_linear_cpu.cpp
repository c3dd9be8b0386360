// A linear layer on binary inputs (the BN paper's MNIST network reads "28x28 binary images"):
//   y[k, o, n] = b[k, o] + Σ_i W[k, i, o]·x[k, n, i] = b[k, o] + Σ_{i : x[k, n, i] = 1} W[k, i, o]
// for `copies` independent layers k side by side. With one pixel in eight set (MNIST binarized at
// 127), summing the rows of W picked by an image costs a fraction of the dense matrix product, and
// so does the weight gradient, ∂ℓ/∂W[k, i, :] = Σ_{n : x[k, n, i] = 1} ∂ℓ/∂y[k, :, n].
//
// The forward pass finds the ones of x (8 pixels at a time, without branching on them) and sums
// the weight rows they pick, one image at a time. When a weight gradient will follow, it also sorts
// the ones by pixel and saves that list: the backward pass sums, for each pixel, the output
// gradients of the images that have it set, and never reads x again.
//
// The same numbers as the dense product up to float rounding (tests/test_binary_linear.py); see
// experiments/binary_linear.py for the layer, how this is built, and the fallback without it.
//
// Layouts: x (copies or 1, N, in), uint8/bool/float/double holding 0s and 1s (one shared copy of
// x serves every layer); W (copies, in, out), each input's weights contiguous; b (copies, out, 1);
// y (copies, out, N), feature-major as the rest of the network. Sums accumulate in W's dtype, as a
// matrix product does.

#include "binary_rows.h"

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ∂ℓ/∂W[k, i, :] = Σ_{n : x[n, i] = 1} ∂ℓ/∂y[k, :, n], from the ones by column (append_by_column).
template <typename T>
void weight_grad_copy(const int32_t* csc, int64_t n_rows, int64_t in, const T* dy, T* dw,
                      int64_t out) {
  thread_local std::vector<T> dy_rows;  // ∂ℓ/∂y[k] as (N, out): one example's row contiguous
  dy_rows.resize(n_rows * out);
  transpose(dy, out, n_rows, dy_rows.data());
  const int32_t* col_start = csc;
  const int32_t* by_col = csc + in + 1;
  for (int64_t i = 0; i < in; ++i) {
    const int64_t count = col_start[i + 1] - col_start[i];
    T* row = dw + i * out;
    if (count == 0)
      std::fill(row, row + out, T(0));
    else
      sum_rows<T>(dy_rows.data(), by_col + col_start[i], count, out, out, row);
  }
}

struct BinaryLinear : public torch::autograd::Function<BinaryLinear> {
  // keep_ones: a weight gradient may follow; the ones of x, by column, are saved for it.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, bool keep_ones) {
    TORCH_CHECK(!x.requires_grad(), "binary_linear: the input is data and has no gradient");
    TORCH_CHECK(x.dim() == 3 && x.is_contiguous() && x.device().is_cpu(),
                "binary_linear expects a contiguous (copies or 1, N, in) CPU input");
    TORCH_CHECK(weight.dim() == 3 && weight.is_contiguous() && weight.device().is_cpu() &&
                    weight.size(1) == x.size(2) &&
                    (x.size(0) == 1 || x.size(0) == weight.size(0)),
                "binary_linear expects a contiguous (copies, in, out) CPU weight matching x");
    const int64_t copies = weight.size(0), n_rows = x.size(1), in = x.size(2),
                  out = weight.size(2);
    TORCH_CHECK(!bias || (bias->is_contiguous() && bias->numel() == copies * out &&
                          bias->dtype() == weight.dtype()),
                "binary_linear expects a contiguous (copies, out, 1) bias of the weight's dtype");
    auto y = at::empty({copies, out, n_rows}, weight.options());
    // The ones of every copy's rows (one list when x is shared); buffers reused between calls.
    const int64_t x_copies = x.size(0);
    thread_local std::vector<Ones> ones;
    if (int64_t(ones.size()) < x_copies) ones.resize(x_copies);
    for (int64_t k = 0; k < x_copies; ++k) find_ones_any(x, k, ones[k]);
    AT_DISPATCH_FLOATING_TYPES(weight.scalar_type(), "binary_linear_forward", [&] {
      const scalar_t* w = weight.const_data_ptr<scalar_t>();
      const scalar_t* b = bias ? bias->const_data_ptr<scalar_t>() : nullptr;
      scalar_t* py = y.data_ptr<scalar_t>();
      for (int64_t k = 0; k < copies; ++k)
        forward_copy<scalar_t>(ones[x_copies == 1 ? 0 : k], n_rows, w + k * in * out,
                               b ? b + k * out : nullptr, py + k * out * n_rows, out);
    });
    if (keep_ones) {
      thread_local std::vector<int32_t> csc;
      csc.clear();
      for (int64_t k = 0; k < x_copies; ++k) append_by_column(ones[k], n_rows, in, csc);
      auto saved = at::empty({int64_t(csc.size())}, at::kInt);
      std::memcpy(saved.data_ptr<int32_t>(), csc.data(), csc.size() * sizeof(int32_t));
      ctx->save_for_backward({saved});
    }
    ctx->saved_data["in"] = in;
    ctx->saved_data["x_copies"] = x_copies;
    ctx->saved_data["has_bias"] = bias.has_value();
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "binary_linear has no double backward; run with BN_COMPILED=0 for the dense layer");
    const int64_t in = ctx->saved_data["in"].toInt();
    const int64_t x_copies = ctx->saved_data["x_copies"].toInt();
    const at::Tensor dy = grads[0].contiguous();  // (copies, out, N), as y
    const int64_t copies = dy.size(0), out = dy.size(1), n_rows = dy.size(2);
    at::Tensor dw, db;
    if (ctx->needs_input_grad(1)) {
      const at::Tensor saved = ctx->get_saved_variables()[0];
      std::vector<const int32_t*> csc(x_copies);  // each copy's columns, one after the other
      const int32_t* next = saved.const_data_ptr<int32_t>();
      for (auto& c : csc) c = next, next += in + 1 + next[in];
      dw = at::empty({copies, in, out}, dy.options());
      AT_DISPATCH_FLOATING_TYPES(dy.scalar_type(), "binary_linear_backward", [&] {
        for (int64_t k = 0; k < copies; ++k)
          weight_grad_copy<scalar_t>(csc[x_copies == 1 ? 0 : k], n_rows, in,
                                     dy.const_data_ptr<scalar_t>() + k * out * n_rows,
                                     dw.data_ptr<scalar_t>() + k * in * out, out);
      });
    }
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2))
      db = dy.sum(-1, /*keepdim=*/true);
    return {at::Tensor(), dw, db, at::Tensor()};
  }
};

at::Tensor binary_linear(const at::Tensor& x, const at::Tensor& weight,
                         const std::optional<at::Tensor>& bias) {
  const bool keep_ones = at::GradMode::is_enabled() && weight.requires_grad();
  return BinaryLinear::apply(x, weight, bias, keep_ones);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(bn_repro_experiments, m) {
  m.def("binary_linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(bn_repro_experiments, CompositeImplicitAutograd, m) {
  m.impl("binary_linear", &binary_linear);
}
