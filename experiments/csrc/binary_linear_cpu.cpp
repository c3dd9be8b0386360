// A linear layer on binary inputs (the BN paper's MNIST network reads "28x28 binary images"):
//   y[k, o, n] = b[k, o] + Σ_i W[k, i, o]·x[k, n, i] = b[k, o] + Σ_{i : x[k, n, i] = 1} W[k, i, o]
// for `copies` independent layers k side by side. With one pixel in eight set (MNIST binarized at
// 127), summing the rows of W picked by an image costs a fraction of the dense matrix product, and
// so does the weight gradient, ∂ℓ/∂W[k, i, :] = Σ_{n : x[k, n, i] = 1} ∂ℓ/∂y[k, :, n].
//
// The same numbers as the dense product up to float rounding (tests/test_binary_linear.py); see
// experiments/binary_linear.py for the layer, how this is built, and the fallback without it.
//
// Layouts: x (copies or 1, N, in), uint8/bool/float/double holding 0s and 1s (one shared copy of
// x serves every layer); W (copies, in, out), each input's weights contiguous; b (copies, out, 1);
// y (copies, out, N), feature-major as the rest of the network. Sums accumulate in W's dtype, as a
// matrix product does.

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

// The hot loop is compiled for AVX2 and for plain x86-64, one picked at load time (an ifunc: GCC
// or Clang on x86-64 Linux); elsewhere, once for the default target.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define BN_REPRO_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define BN_REPRO_AVX2_CLONES
#endif

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The indices of the ones of each row of x: row r's are idx[start[r] : start[r + 1]] (CSR).
struct Ones {
  std::vector<int32_t> idx;
  std::vector<int64_t> start;
};

template <typename X>
bool is_binary(X v) {
  return v == X(0) || v == X(1);
}

// Byte rows (uint8/bool): 8 pixels per 64-bit word; a zero word, most of an MNIST image's border,
// costs one test, and a word's ones are read off a bit mask.
void find_ones(const uint8_t* x, int64_t rows, int64_t cols, Ones& ones) {
  constexpr uint64_t kLow = 0x0101010101010101ULL;
  ones.idx.resize(rows * cols);
  ones.start.resize(rows + 1);
  int32_t* idx = ones.idx.data();
  int64_t count = 0;
  uint64_t high_bits = 0;  // any bit but the lowest of a byte: a value other than 0 and 1
  ones.start[0] = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = x + r * cols;
    int64_t i = 0;
    for (; i + 8 <= cols; i += 8) {
      uint64_t word;
      std::memcpy(&word, row + i, 8);
      if (word == 0) continue;
      high_bits |= word & ~kLow;
      // The low bit of byte j lands on bit 56 + j: the top byte holds one bit per pixel.
      uint32_t mask = uint32_t(((word & kLow) * 0x0102040810204080ULL) >> 56);
      for (; mask; mask &= mask - 1) idx[count++] = int32_t(i + __builtin_ctz(mask));
    }
    for (; i < cols; ++i) {
      high_bits |= row[i] & ~1u;
      if (row[i]) idx[count++] = int32_t(i);
    }
    ones.start[r + 1] = count;
  }
  TORCH_CHECK(high_bits == 0, "binary_linear: the input holds a value other than 0 and 1");
  ones.idx.resize(count);
}

template <typename X>
void find_ones(const X* x, int64_t rows, int64_t cols, Ones& ones) {
  ones.idx.clear();
  ones.start.assign(1, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const X* row = x + r * cols;
    for (int64_t i = 0; i < cols; ++i) {
      TORCH_CHECK(is_binary(row[i]), "binary_linear: the input holds a value other than 0 and 1");
      if (row[i] != X(0)) ones.idx.push_back(int32_t(i));
    }
    ones.start.push_back(int64_t(ones.idx.size()));
  }
}

// acc[o] = Σ_p rows[p][o] for o < width, the whole width in registers: NV vectors of 32 bytes
// and a 16-byte one (100 floats = 12 + ½ vectors), so each row is read once.
template <typename T, int NV>
BN_REPRO_AVX2_CLONES void sum_rows_fixed(const T* const* rows, int64_t count, int64_t width,
                                         T* acc) {
  typedef T V __attribute__((vector_size(32)));
  typedef T H __attribute__((vector_size(16)));
  constexpr int64_t L = 32 / sizeof(T);
  const bool half = width - NV * L >= L / 2;
  V a[NV > 0 ? NV : 1] = {};
  H h = {};
  for (int64_t p = 0; p < count; ++p) {
    const T* row = rows[p];
    for (int v = 0; v < NV; ++v) {
      V x;
      std::memcpy(&x, row + v * L, sizeof(V));
      a[v] += x;
    }
    if (half) {
      H x;
      std::memcpy(&x, row + NV * L, sizeof(H));
      h += x;
    }
  }
  std::memcpy(acc, a, NV * sizeof(V));
  int64_t o = NV * L;
  if (half) std::memcpy(acc + o, &h, sizeof(H)), o += L / 2;
  for (; o < width; ++o) {  // fewer than L / 2 values left
    T sum = 0;
    for (int64_t p = 0; p < count; ++p) sum += rows[p][o];
    acc[o] = sum;
  }
}

template <typename T>
void sum_rows(const T* const* rows, int64_t count, int64_t width, T* acc) {
  constexpr int64_t L = 32 / sizeof(T);
  switch (width / L) {
#define BN_REPRO_CASE(NV) \
  case NV:                \
    return sum_rows_fixed<T, NV>(rows, count, width, acc);
    BN_REPRO_CASE(0) BN_REPRO_CASE(1) BN_REPRO_CASE(2) BN_REPRO_CASE(3) BN_REPRO_CASE(4)
    BN_REPRO_CASE(5) BN_REPRO_CASE(6) BN_REPRO_CASE(7) BN_REPRO_CASE(8) BN_REPRO_CASE(9)
    BN_REPRO_CASE(10) BN_REPRO_CASE(11) BN_REPRO_CASE(12) BN_REPRO_CASE(13)
#undef BN_REPRO_CASE
    default: {  // wider: 12 vectors at a time, each block a pass over the rows
      std::vector<const T*> shifted(rows, rows + count);
      int64_t o = 0;
      for (; width - o >= 14 * L; o += 12 * L) {
        sum_rows_fixed<T, 12>(shifted.data(), count, 12 * L, acc + o);
        for (auto& r : shifted) r += 12 * L;
      }
      sum_rows<T>(shifted.data(), count, width - o, acc + o);
    }
  }
}

// y[k, :, n] = b[k] + Σ_{i ∈ ones(n)} W[k, i, :]
template <typename T>
void forward_copy(const Ones& ones, int64_t n_rows, const T* w, const T* b, T* y, int64_t out) {
  std::vector<const T*> rows;
  std::vector<T> acc(out);
  for (int64_t n = 0; n < n_rows; ++n) {
    rows.clear();
    for (int64_t p = ones.start[n]; p < ones.start[n + 1]; ++p)
      rows.push_back(w + ones.idx[p] * out);
    sum_rows<T>(rows.data(), int64_t(rows.size()), out, acc.data());
    for (int64_t o = 0; o < out; ++o) y[o * n_rows + n] = b ? acc[o] + b[o] : acc[o];
  }
}

// ∂ℓ/∂W[k, i, :] = Σ_{n : x[n, i] = 1} ∂ℓ/∂y[k, :, n]: the ones again, by column (CSC).
template <typename T>
void weight_grad_copy(const Ones& ones, int64_t n_rows, int64_t in, const T* dy, T* dw,
                      int64_t out) {
  std::vector<T> dy_rows(n_rows * out);  // ∂ℓ/∂y[k] as (N, out): one example's row contiguous
  for (int64_t o = 0; o < out; ++o)
    for (int64_t n = 0; n < n_rows; ++n) dy_rows[n * out + o] = dy[o * n_rows + n];
  std::vector<int64_t> col_start(in + 1, 0);
  for (int32_t i : ones.idx) ++col_start[i + 1];
  for (int64_t i = 0; i < in; ++i) col_start[i + 1] += col_start[i];
  std::vector<const T*> col_rows(ones.idx.size());
  std::vector<int64_t> fill(col_start.begin(), col_start.end() - 1);
  for (int64_t n = 0; n < n_rows; ++n)
    for (int64_t p = ones.start[n]; p < ones.start[n + 1]; ++p)
      col_rows[fill[ones.idx[p]]++] = dy_rows.data() + n * out;
  for (int64_t i = 0; i < in; ++i) {
    const int64_t count = col_start[i + 1] - col_start[i];
    T* row = dw + i * out;
    if (count == 0) {
      std::fill(row, row + out, T(0));
      continue;
    }
    sum_rows<T>(col_rows.data() + col_start[i], count, out, row);
  }
}

void find_ones_any(const at::Tensor& x, int64_t copy, Ones& ones) {
  const int64_t rows = x.size(1), cols = x.size(2);
  AT_DISPATCH_ALL_TYPES_AND(at::kBool, x.scalar_type(), "binary_linear_ones", [&] {
    const scalar_t* base = x.const_data_ptr<scalar_t>() + copy * rows * cols;
    if constexpr (sizeof(scalar_t) == 1)
      find_ones(reinterpret_cast<const uint8_t*>(base), rows, cols, ones);
    else
      find_ones(base, rows, cols, ones);
  });
}

struct BinaryLinear : public torch::autograd::Function<BinaryLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias) {
    TORCH_CHECK(!x.requires_grad(), "binary_linear: the input is data and has no gradient");
    TORCH_CHECK(x.dim() == 3 && x.is_contiguous() && x.device().is_cpu(),
                "binary_linear expects a contiguous (copies or 1, N, in) CPU input");
    TORCH_CHECK(weight.dim() == 3 && weight.is_contiguous() && weight.device().is_cpu() &&
                    weight.size(1) == x.size(2) &&
                    (x.size(0) == 1 || x.size(0) == weight.size(0)),
                "binary_linear expects a contiguous (copies, in, out) CPU weight matching x");
    const int64_t copies = weight.size(0), n_rows = x.size(1), out = weight.size(2);
    TORCH_CHECK(!bias || (bias->is_contiguous() && bias->numel() == copies * out &&
                          bias->dtype() == weight.dtype()),
                "binary_linear expects a contiguous (copies, out, 1) bias of the weight's dtype");
    auto y = at::empty({copies, out, n_rows}, weight.options());
    // The ones of every copy's rows, kept for the weight gradient (one list when x is shared).
    const int64_t x_copies = x.size(0);
    std::vector<Ones> ones(x_copies);
    for (int64_t k = 0; k < x_copies; ++k) find_ones_any(x, k, ones[k]);
    AT_DISPATCH_FLOATING_TYPES(weight.scalar_type(), "binary_linear_forward", [&] {
      const scalar_t* w = weight.const_data_ptr<scalar_t>();
      const scalar_t* b = bias ? bias->const_data_ptr<scalar_t>() : nullptr;
      scalar_t* py = y.data_ptr<scalar_t>();
      for (int64_t k = 0; k < copies; ++k)
        forward_copy<scalar_t>(ones[x_copies == 1 ? 0 : k], n_rows, w + k * weight.size(1) * out,
                               b ? b + k * out : nullptr, py + k * out * n_rows, out);
    });
    ctx->save_for_backward({x});
    ctx->saved_data["in"] = weight.size(1);
    ctx->saved_data["copies"] = copies;
    ctx->saved_data["has_bias"] = bias.has_value();
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "binary_linear has no double backward; run with BN_COMPILED=0 for the dense layer");
    const at::Tensor x = ctx->get_saved_variables()[0];
    const int64_t in = ctx->saved_data["in"].toInt(), copies = ctx->saved_data["copies"].toInt();
    const at::Tensor dy = grads[0].contiguous();
    const int64_t out = dy.size(1), n_rows = dy.size(2);
    at::Tensor dw, db;
    if (ctx->needs_input_grad(1)) {
      dw = at::empty({copies, in, out}, dy.options());
      Ones ones;  // found again: cheaper than keeping them from the forward pass
      for (int64_t k = 0; k < copies; ++k) {
        if (k == 0 || x.size(0) > 1) find_ones_any(x, x.size(0) == 1 ? 0 : k, ones);
        AT_DISPATCH_FLOATING_TYPES(dy.scalar_type(), "binary_linear_backward", [&] {
          const scalar_t* dy_k = dy.const_data_ptr<scalar_t>() + k * out * n_rows;
          weight_grad_copy<scalar_t>(ones, n_rows, in, dy_k, dw.data_ptr<scalar_t>() + k * in * out,
                                     out);
        });
      }
    }
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2))
      db = dy.sum(-1, /*keepdim=*/true);
    return {at::Tensor(), dw, db};
  }
};

at::Tensor binary_linear(const at::Tensor& x, const at::Tensor& weight,
                         const std::optional<at::Tensor>& bias) {
  return BinaryLinear::apply(x, weight, bias);
}

}  // namespace

TORCH_LIBRARY(bn_repro_experiments, m) {
  m.def("binary_linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(bn_repro_experiments, CompositeImplicitAutograd, m) {
  m.impl("binary_linear", &binary_linear);
}
