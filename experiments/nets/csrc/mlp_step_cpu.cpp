// One plain-SGD step of the BN paper's MNIST network (Sec. 4.1: 784 → 100 → 100 → 100 → 10,
// sigmoid hidden units, with or without per-unit batch normalization), `copies` networks side by
// side, in one call: forward, cross-entropy, backward and the update of every parameter and
// running statistic, in place.
//
// At these sizes (three networks, 60 examples, 100 units) a step written as PyTorch modules is
// mostly per-operation cost: about sixty small operations forward and back, an autograd graph and
// gradients that are written out and read again by the update. Here the matrix products go to a
// kernel for these shapes (small_gemm.h: AVX-512 or AVX2, the same bits on both; ATen's batched
// products on a CPU with neither; the sigmoid is ATen's, whose last bits do depend on the
// instruction set); everything per unit (the statistics, normalization, noise, the activation's
// and normalization's backward, the γ/β/bias updates) is one pass over that unit's row of N values
// (activations are feature-major, (copies, units, N): a unit's N values are contiguous); the weight
// update is folded into the GEMM that would have produced the gradient (W ← decay·W − lr·G·Uᵀ,
// after Wᵀ·G has been taken from the old W); and a binary first layer sums the weight rows the
// ones of the input pick, forward, and updates only those rows, backward.
//
// The same numbers as the PyTorch path (SigmoidMLP's modules, autograd and the SGD update) up to
// float rounding: tests/experiments/nets/test_mlp_step.py holds them equal in float64 for every
// variant the studies use. Per-unit sums accumulate in double, as ATen's CPU batch norm does.
//
// Layouts, K copies, N examples, hidden widths H_l, C classes:
//   x (K or 1, N, in): uint8/bool 0/1 (binary first layer, weight (K, in, H_0)) or floating point
//     (dense first layer, weight (K, H_0, in)); y (K, N) int64 labels;
//   weights[l] (K, H_l, H_{l-1}) for l ≥ 1; output weight (K, C, H_last), bias (K, C, 1);
//   hidden biases (K, H_l, 1) (none with a norm before the activation); per-layer norm tensors
//   (γ, β, running mean, running var) of K·H_l values and a num_batches_tracked counter;
//   noise (s, m) per layer, (K, H_l, N): Santurkar et al.'s covariate shift after each norm.

#include "binary_rows.h"
#include "small_gemm.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

struct Options {
  double lr, weight_decay, momentum, eps;
  bool norm_after, relu, binary_input;
};

// What the backward pass of one hidden layer reads.
struct Layer {
  at::Tensor input;   // its input (K, H_{l-1}, N) (undefined for the first layer)
  at::Tensor out;     // its output, the next layer's input (K, H, N)
  at::Tensor act;     // the activation's output (K, H, N): `out` itself unless the norm follows it
  at::Tensor xhat;    // the normalized values (K, H, N)
  at::Tensor invstd;  // 1/sqrt(σ²_B + ε) per unit (K·H), double
};

// Σa[i] and Σa[i]·b[i] over a row of n values, in double, four lanes at a time in two
// interleaved sets of vector accumulators (independent chains; a row is only ~60 values, so the
// loop is written out rather than left to the vectorizer). With b = a: Σv and Σv².
template <typename T>
BN_REPRO_AVX2_CLONES void pair_sums(const T* a, const T* b, int64_t n, double& sum_a,
                                    double& sum_ab) {
  typedef T In __attribute__((vector_size(4 * sizeof(T)), aligned(sizeof(T))));
  typedef double D __attribute__((vector_size(32)));
  D s0 = {}, s1 = {}, p0 = {}, p1 = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const D a0 = __builtin_convertvector(*reinterpret_cast<const In*>(a + i), D);
    const D a1 = __builtin_convertvector(*reinterpret_cast<const In*>(a + i + 4), D);
    const D b0 = __builtin_convertvector(*reinterpret_cast<const In*>(b + i), D);
    const D b1 = __builtin_convertvector(*reinterpret_cast<const In*>(b + i + 4), D);
    s0 += a0, s1 += a1, p0 += a0 * b0, p1 += a1 * b1;
  }
  if (i + 4 <= n) {
    const D a0 = __builtin_convertvector(*reinterpret_cast<const In*>(a + i), D);
    const D b0 = __builtin_convertvector(*reinterpret_cast<const In*>(b + i), D);
    s0 += a0, p0 += a0 * b0, i += 4;
  }
  const D s = s0 + s1, p = p0 + p1;
  sum_a = (s[0] + s[1]) + (s[2] + s[3]);
  sum_ab = (p[0] + p[1]) + (p[2] + p[3]);
  for (; i < n; ++i) sum_a += double(a[i]), sum_ab += double(a[i]) * double(b[i]);
}

template <typename T>
double row_sum(const T* v, int64_t n) {
  double sum, unused;
  pair_sums(v, v, n, sum, unused);
  return sum;
}

// One unit's batch statistics over its row of n values: Σv and Σv² in one pass, in double (the
// cancellation in Σv²/n − mean² is far below float's rounding for these rows).
template <typename T>
void row_stats(const T* v, int64_t n, double& mean, double& var) {
  double sum, sum_sq;
  pair_sums(v, v, n, sum, sum_sq);
  mean = sum / n;
  var = std::max(sum_sq / n - mean * mean, 0.0);
}

// Normalizes every row of `in` (rows × n) into xhat and writes γ·x̂ + β (then s ⊙ · + m with
// noise) to `out`; updates the running statistics (torch's convention: unbiased variance).
template <typename T>
BN_REPRO_AVX2_CLONES void norm_forward(const T* in, int64_t rows, int64_t n, const Options& o,
                                       const T* gamma, const T* beta, T* running_mean,
                                       T* running_var, const T* s, const T* m, T* xhat,
                                       double* invstd, T* out) {
  const double bessel = n > 1 ? double(n) / (n - 1) : 1.0;
  for (int64_t r = 0; r < rows; ++r) {
    double mean, var;
    row_stats(in + r * n, n, mean, var);
    const double inv = 1.0 / std::sqrt(var + o.eps);
    invstd[r] = inv;
    const T g = gamma[r], b = beta[r];
    const T mu = T(mean), is = T(inv);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = r * n + i;
      const T xh = (in[j] - mu) * is;
      xhat[j] = xh;
      const T y = g * xh + b;
      out[j] = s ? s[j] * y + m[j] : y;
    }
    running_mean[r] = T((1 - o.momentum) * running_mean[r] + o.momentum * mean);
    running_var[r] = T((1 - o.momentum) * running_var[r] + o.momentum * var * bessel);
  }
}

// The norm's backward pass, row by row: from ∂ℓ/∂out (gout, noise undone here) to ∂ℓ/∂in,
// written over gout; then the SGD step of γ and β.
template <typename T>
BN_REPRO_AVX2_CLONES void norm_backward(T* gout, int64_t rows, int64_t n, const Options& o,
                                        T* gamma, T* beta, const T* s, const T* xhat,
                                        const double* invstd) {
  for (int64_t r = 0; r < rows; ++r) {
    T* g = gout + r * n;
    const T* xh = xhat + r * n;
    if (s)
      for (int64_t i = 0; i < n; ++i) g[i] *= s[r * n + i];
    double sum_g, sum_gx;
    pair_sums(g, xh, n, sum_g, sum_gx);
    const T k = T(double(gamma[r]) * invstd[r]);
    const T mean_g = T(sum_g / n), mean_gx = T(sum_gx / n);
    for (int64_t i = 0; i < n; ++i) g[i] = k * (g[i] - mean_g - xh[i] * mean_gx);
    gamma[r] = T(gamma[r] - o.lr * sum_gx);
    beta[r] = T(beta[r] - o.lr * sum_g);
  }
}

// g ← g ⊙ act'(·), from the activation's output a: a(1 − a) for the sigmoid, [a > 0] for ReLU.
template <typename T>
BN_REPRO_AVX2_CLONES void activation_backward(T* g, const T* a, int64_t count, bool relu) {
  if (relu)
    for (int64_t i = 0; i < count; ++i) g[i] = a[i] > T(0) ? g[i] : T(0);
  else
    for (int64_t i = 0; i < count; ++i) g[i] *= a[i] * (T(1) - a[i]);
}

void activation(const at::Tensor& in, at::Tensor& out, bool relu) {
  if (relu)
    at::clamp_min_out(out, in, 0);
  else
    at::sigmoid_out(out, in);
}

// b ← b − lr·Σ_n g, per row.
template <typename T>
void bias_step(T* b, const T* g, int64_t rows, int64_t n, double lr) {
  for (int64_t r = 0; r < rows; ++r)
    b[r] = T(b[r] - lr * row_sum(g + r * n, n));
}

// Softmax cross-entropy of logits (K, C, N) against labels (K, N): each copy's mean loss, and
// ∂(Σ_k loss_k)/∂logits written over the logits.
template <typename T>
std::vector<double> cross_entropy(T* logits, const int64_t* labels, int64_t copies,
                                  int64_t classes, int64_t n) {
  std::vector<double> losses(copies, 0.0), e(classes);
  for (int64_t k = 0; k < copies; ++k) {
    T* z = logits + k * classes * n;
    T total = 0;  // in T, as the mean of the losses is: beyond T's range it is inf (diverged)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t label = labels[k * n + i];
      TORCH_CHECK(label >= 0 && label < classes, "mlp_sgd_step: a label is outside [0, ",
                  classes, ")");
      double top = z[i];
      for (int64_t c = 1; c < classes; ++c) top = std::max(top, double(z[c * n + i]));
      double sum = 0;
      for (int64_t c = 0; c < classes; ++c) sum += e[c] = std::exp(double(z[c * n + i]) - top);
      total += T(top) + T(std::log(sum)) - z[label * n + i];  // in T, as log_softmax
      for (int64_t c = 0; c < classes; ++c) z[c * n + i] = T((e[c] / sum - (c == label)) / n);
    }
    losses[k] = double(total / T(n));
  }
  return losses;
}

// row[o] -= step · acc[o]
template <typename T>
BN_REPRO_AVX2_CLONES void axpy_sub(T* row, const T* acc, int64_t width, T step) {
  for (int64_t o = 0; o < width; ++o) row[o] -= step * acc[o];
}

// The ones of each copy's input, by row (CSR, for the forward pass) and by column (CSC, for the
// update: where pixel i is set); x shared by the copies has one of each.
struct BinaryInput {
  std::vector<Ones> rows;
  std::vector<int32_t> csc;
  std::vector<int64_t> offset;  // copy k's columns start at csc[offset[k]]
  int64_t copies = 0;
  const Ones& rows_of(int64_t k) const { return rows[copies == 1 ? 0 : k]; }
  const int32_t* columns_of(int64_t k) const { return csc.data() + offset[copies == 1 ? 0 : k]; }
};

void find_ones(const at::Tensor& x, BinaryInput& input) {
  input.copies = x.size(0);
  if (int64_t(input.rows.size()) < input.copies) input.rows.resize(input.copies);
  input.csc.clear();
  input.offset.clear();
  for (int64_t k = 0; k < input.copies; ++k) {
    find_ones_any(x, k, input.rows[k]);
    input.offset.push_back(int64_t(input.csc.size()));
    append_by_column(input.rows[k], x.size(1), x.size(2), input.csc);
  }
}

// The first layer on a binary input, z[k, :, n] = Σ_{i : x[k, n, i] = 1} W[k, i, :] (+ b), copy by
// copy (one copy's weight fits in a core's L2 cache).
template <typename T>
void binary_forward(const BinaryInput& input, const at::Tensor& w, const T* b, at::Tensor& z) {
  const int64_t copies = w.size(0), in = w.size(1), out = w.size(2), n = z.size(2);
  for (int64_t k = 0; k < copies; ++k)
    forward_copy<T>(input.rows_of(k), n, w.const_data_ptr<T>() + k * in * out,
                    b ? b + k * out : nullptr, z.data_ptr<T>() + k * out * n, out);
}

// W[k, i, :] ← W[k, i, :] − lr·Σ_{n : x[k, n, i] = 1} g[k, :, n]: only the rows of set pixels.
template <typename T>
void binary_update(const BinaryInput& input, const at::Tensor& g, at::Tensor& w, double lr) {
  const int64_t copies = w.size(0), in = w.size(1), out = w.size(2), n = g.size(2);
  thread_local std::vector<T> g_rows, acc;
  const T step = T(lr);
  g_rows.resize(n * out);
  acc.resize(out);
  for (int64_t k = 0; k < copies; ++k) {
    const int32_t* col_start = input.columns_of(k);
    const int32_t* by_col = col_start + in + 1;
    const T* gk = g.const_data_ptr<T>() + k * out * n;
    transpose(gk, out, n, g_rows.data());
    T* wk = w.data_ptr<T>() + k * in * out;
    for (int64_t i = 0; i < in; ++i) {
      const int64_t count = col_start[i + 1] - col_start[i];
      if (count == 0) continue;
      sum_rows<T>(g_rows.data(), by_col + col_start[i], count, out, out, acc.data());
      axpy_sub(wk + i * out, acc.data(), out, step);
    }
  }
}

// The step's intermediate tensors, kept from call to call (the shapes repeat every step): fresh
// allocations of these sizes would be new pages, zeroed by the kernel, every step.
at::Tensor workspace(int64_t slot, at::IntArrayRef sizes, const at::TensorOptions& options) {
  thread_local std::vector<at::Tensor> pool;
  if (int64_t(pool.size()) <= slot) pool.resize(slot + 1);
  at::Tensor& t = pool[slot];
  if (!t.defined() || t.sizes() != sizes || t.scalar_type() != options.dtype().toScalarType())
    t = at::empty(sizes, options);
  return t;
}

// The step's matrix products, copy by copy through small_gemm.h where it has a build for this CPU
// (the same bits on every such CPU), else through ATen's batched products. An operand of one copy
// (size(0) == 1: the shared input) serves every copy.
template <typename T>
const T* copy_of(const at::Tensor& t, int64_t k) {
  return t.const_data_ptr<T>() + (t.size(0) == 1 ? 0 : k) * t.stride(0);
}

// z[k] = w[k]·u[k] (+ bias[k]), for w (K, H, In), u (K or 1, In, N) contiguous, z (K, H, N).
template <typename T>
void forward_product(const at::Tensor& w, const at::Tensor* bias, const at::Tensor& u,
                     at::Tensor& z) {
  const int64_t copies = w.size(0), units = w.size(1), in = w.size(2), n = z.size(2);
  if (!small_gemm::available()) {
    const at::Tensor rhs = u.expand({copies, in, n});
    if (bias)
      at::baddbmm_out(z, *bias, w, rhs);
    else
      at::bmm_out(z, w, rhs);
    return;
  }
  for (int64_t k = 0; k < copies; ++k) {
    small_gemm::Epilogue<T> e;
    if (bias) {
      e.kind = small_gemm::Epilogue<T>::kAddBias;
      e.bias = bias->const_data_ptr<T>() + k * units;
    }
    small_gemm::run<T>({.m = units, .p = n, .k = in,
                        .a = w.const_data_ptr<T>() + k * units * in, .a_row = in, .a_col = 1,
                        .b = copy_of<T>(u, k), .ldb = n,
                        .c = z.data_ptr<T>() + k * units * n, .ldc = n, .epilogue = e});
  }
}

// below[k] = w[k]ᵀ·g[k], for w (K, H, In), g (K, H, N), below (K, In, N).
template <typename T>
void input_gradient(const at::Tensor& w, const at::Tensor& g, at::Tensor& below) {
  const int64_t copies = w.size(0), units = w.size(1), in = w.size(2), n = g.size(2);
  if (!small_gemm::available()) {
    at::bmm_out(below, w.transpose(1, 2), g);
    return;
  }
  for (int64_t k = 0; k < copies; ++k)
    small_gemm::run<T>({.m = in, .p = n, .k = units,
                        .a = w.const_data_ptr<T>() + k * units * in, .a_row = 1, .a_col = in,
                        .b = g.const_data_ptr<T>() + k * units * n, .ldb = n,
                        .c = below.data_ptr<T>() + k * in * n, .ldc = n, .epilogue = {}});
}

// w[k] ← decay·w[k] − lr·g[k]·rows[k], for w (K, H, In), g (K, H, N) and the layer's input as rows
// of examples, rows (K or 1, N, In) contiguous.
template <typename T>
void weight_step(const at::Tensor& w, const at::Tensor& g, const at::Tensor& rows, double decay,
                 double lr) {
  const int64_t copies = w.size(0), units = w.size(1), in = w.size(2), n = g.size(2);
  if (!small_gemm::available()) {
    w.baddbmm_(g, rows.expand({copies, n, in}), decay, -lr);
    return;
  }
  small_gemm::Epilogue<T> e;
  e.kind = small_gemm::Epilogue<T>::kUpdate, e.beta = T(decay), e.alpha = T(-lr);
  for (int64_t k = 0; k < copies; ++k)
    small_gemm::run<T>({.m = units, .p = in, .k = n,
                        .a = g.const_data_ptr<T>() + k * units * n, .a_row = n, .a_col = 1,
                        .b = copy_of<T>(rows, k), .ldb = in,
                        .c = w.data_ptr<T>() + k * units * in, .ldc = in, .epilogue = e});
}

// A layer's input (K, In, N) as rows of examples (K, N, In), for its weight's update.
at::Tensor example_rows(const at::Tensor& input, int64_t slot) {
  if (!small_gemm::available()) return input.transpose(1, 2);
  at::Tensor rows = workspace(slot, {input.size(0), input.size(2), input.size(1)}, input.options());
  return rows.copy_(input.transpose(1, 2));
}

template <typename T>
at::Tensor step(const at::Tensor& x, const at::Tensor& y, const std::vector<at::Tensor>& weights,
                const std::vector<at::Tensor>& biases, const at::Tensor& out_weight,
                const at::Tensor& out_bias, const std::vector<at::Tensor>& gammas,
                const std::vector<at::Tensor>& betas, const std::vector<at::Tensor>& means,
                const std::vector<at::Tensor>& vars, const std::vector<at::Tensor>& counters,
                const std::vector<at::Tensor>& noise_scales,
                const std::vector<at::Tensor>& noise_shifts, const Options& o) {
  const int64_t depth = int64_t(weights.size()), copies = out_weight.size(0), n = y.size(1);
  const bool binary = o.binary_input;
  const bool norm = !gammas.empty(), noise = !noise_scales.empty(), has_bias = !biases.empty();
  const double decay = 1.0 - o.lr * o.weight_decay;
  const auto opts = out_weight.options();
  thread_local BinaryInput input;
  std::vector<Layer> layers(depth);
  // Workspace slots: layer l's are 8l + 0..6 (z, out, x̂, 1/σ, the activation, the gradient
  // below, the input by example); the output layer's top + 0..3 (logits, ∂ℓ/∂u, u by example, x
  // by feature).
  const int64_t top = 8 * depth;
  const at::Tensor xd = binary ? x : x.to(out_weight.scalar_type());  // a dense first layer's input
  at::Tensor xt;  // ... by feature, (K or 1, in, N)
  if (!binary)
    xt = workspace(top + 3, {x.size(0), x.size(2), n}, opts).copy_(xd.transpose(1, 2));

  // Forward.
  at::Tensor u;  // the current layer's input, (K, H_{l-1}, N)
  for (int64_t l = 0; l < depth; ++l) {
    Layer& L = layers[l];
    const at::Tensor& w = weights[l];
    const int64_t units = binary && l == 0 ? w.size(2) : w.size(1), rows = copies * units;
    const T* b = has_bias ? biases[l].const_data_ptr<T>() : nullptr;
    const int64_t slot = 8 * l;  // this layer's workspace slots
    at::Tensor z = workspace(slot, {copies, units, n}, opts);
    if (l == 0 && binary) {
      find_ones(x, input);
      binary_forward<T>(input, w, b, z);
    } else {
      forward_product<T>(w, has_bias ? &biases[l] : nullptr, l == 0 ? xt : u, z);
    }
    L.input = l == 0 ? at::Tensor() : u;
    L.out = workspace(slot + 1, z.sizes(), opts);
    if (norm) {
      L.xhat = workspace(slot + 2, z.sizes(), opts);
      L.invstd = workspace(slot + 3, {rows}, opts.dtype(at::kDouble));
      const T* s = noise ? noise_scales[l].const_data_ptr<T>() : nullptr;
      const T* m = noise ? noise_shifts[l].const_data_ptr<T>() : nullptr;
      at::Tensor normed = o.norm_after ? L.out : z;  // the norm's output
      if (o.norm_after) {
        L.act = workspace(slot + 4, z.sizes(), opts);
        activation(z, L.act, o.relu);
      }
      const at::Tensor& normed_in = o.norm_after ? L.act : z;
      norm_forward<T>(normed_in.const_data_ptr<T>(), rows, n, o, gammas[l].const_data_ptr<T>(),
                      betas[l].const_data_ptr<T>(), means[l].data_ptr<T>(),
                      vars[l].data_ptr<T>(), s, m, L.xhat.data_ptr<T>(),
                      L.invstd.data_ptr<double>(), normed.data_ptr<T>());
      counters[l].add_(1);
      if (!o.norm_after) {
        activation(z, L.out, o.relu);
        L.act = L.out;
      }
    } else {
      activation(z, L.out, o.relu);
      L.act = L.out;
    }
    u = L.out;
  }
  at::Tensor logits = workspace(top, {copies, out_weight.size(1), n}, opts);  // (K, C, N)
  forward_product<T>(out_weight, &out_bias, u, logits);
  const std::vector<double> losses =
      cross_entropy<T>(logits.data_ptr<T>(), y.const_data_ptr<int64_t>(), copies,
                       logits.size(1), n);

  // Backward, each layer's parameters updated once the gradient below it is taken.
  at::Tensor g = workspace(top + 1, u.sizes(), opts);  // ∂ℓ/∂(last hidden output)
  input_gradient<T>(out_weight, logits, g);
  weight_step<T>(out_weight, logits, example_rows(u, top + 2), decay, o.lr);
  bias_step<T>(out_bias.data_ptr<T>(), logits.const_data_ptr<T>(), logits.size(0) * logits.size(1),
               n, o.lr);
  for (int64_t l = depth - 1; l >= 0; --l) {
    Layer& L = layers[l];
    const int64_t rows = g.size(0) * g.size(1);
    T* gp = g.data_ptr<T>();
    const T* s = noise ? noise_scales[l].const_data_ptr<T>() : nullptr;
    if (norm && o.norm_after) {
      norm_backward<T>(gp, rows, n, o, gammas[l].data_ptr<T>(), betas[l].data_ptr<T>(), s,
                       L.xhat.const_data_ptr<T>(), L.invstd.const_data_ptr<double>());
      activation_backward<T>(gp, L.act.const_data_ptr<T>(), rows * n, o.relu);
    } else {
      activation_backward<T>(gp, L.act.const_data_ptr<T>(), rows * n, o.relu);
      if (norm)
        norm_backward<T>(gp, rows, n, o, gammas[l].data_ptr<T>(), betas[l].data_ptr<T>(), s,
                         L.xhat.const_data_ptr<T>(), L.invstd.const_data_ptr<double>());
    }
    if (has_bias) bias_step<T>(biases[l].data_ptr<T>(), gp, rows, n, o.lr);
    at::Tensor w = weights[l];
    if (l > 0) {
      at::Tensor below = workspace(8 * l + 5, L.input.sizes(), opts);
      input_gradient<T>(w, g, below);
      weight_step<T>(w, g, example_rows(L.input, 8 * l + 6), decay, o.lr);
      g = below;
    } else if (binary) {
      if (decay != 1.0) w.mul_(decay);
      binary_update<T>(input, g, w, o.lr);
    } else {
      weight_step<T>(w, g, xd, decay, o.lr);
    }
  }
  at::Tensor result = at::empty({copies}, opts.dtype(at::kDouble));
  std::copy(losses.begin(), losses.end(), result.data_ptr<double>());
  return result;
}

void check_tensor(const at::Tensor& t, const at::Tensor& like, const char* what) {
  TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == like.scalar_type(),
              "mlp_sgd_step: ", what, " must be a contiguous CPU tensor of the weights' dtype");
}

// Every tensor's shape against the network x → hidden layers → output, so that no loop reads
// outside a tensor.
void check_shapes(const at::Tensor& x, const at::Tensor& y, at::TensorList weights,
                  at::TensorList biases, const at::Tensor& out_weight, const at::Tensor& out_bias,
                  at::TensorList gammas, at::TensorList means, at::TensorList vars,
                  at::TensorList counters, at::TensorList noise_scales, bool binary_input) {
  const int64_t copies = out_weight.size(0), n = x.size(1);
  TORCH_CHECK(binary_input || at::isFloatingType(x.scalar_type()),
              "mlp_sgd_step: a dense first layer needs a floating-point input");
  int64_t width = x.size(2);
  for (size_t l = 0; l < weights.size(); ++l) {
    const at::Tensor& w = weights[l];
    const bool input_major = binary_input && l == 0;
    TORCH_CHECK(w.dim() == 3 && w.size(0) == copies && w.size(input_major ? 1 : 2) == width,
                "mlp_sgd_step: hidden weight ", l, " has shape ", w.sizes(), ", which does not ",
                "read ", width, " features for ", copies, " copies",
                input_major ? " (a binary first layer's weight is (copies, in, out))" : "");
    width = w.size(input_major ? 2 : 1);
    const int64_t units = copies * width;
    TORCH_CHECK(biases.empty() || (biases[l].numel() == units && biases[l].size(0) == copies),
                "mlp_sgd_step: hidden bias ", l, " must be (copies, units, 1)");
    if (!gammas.empty())
      for (const at::Tensor& t : {gammas[l], means[l], vars[l]})
        TORCH_CHECK(t.numel() == units, "mlp_sgd_step: a norm of layer ", l, " needs ", units,
                    " channels, has ", t.numel());
    TORCH_CHECK(counters.empty() || counters[l].numel() == 1,
                "mlp_sgd_step: num_batches_tracked is one value");
    TORCH_CHECK(noise_scales.empty() || noise_scales[l].numel() == units * n,
                "mlp_sgd_step: the noise of layer ", l, " must have ", units * n, " values");
  }
  TORCH_CHECK(out_weight.dim() == 3 && out_weight.size(2) == width,
              "mlp_sgd_step: the output weight must be (copies, classes, ", width, ")");
  TORCH_CHECK(out_bias.numel() == copies * out_weight.size(1),
              "mlp_sgd_step: the output bias must be (copies, classes, 1)");
}

at::Tensor mlp_sgd_step(const at::Tensor& x, const at::Tensor& y, at::TensorList weights,
                        at::TensorList biases, const at::Tensor& out_weight,
                        const at::Tensor& out_bias, at::TensorList gammas, at::TensorList betas,
                        at::TensorList running_means, at::TensorList running_vars,
                        at::TensorList counters, at::TensorList noise_scales,
                        at::TensorList noise_shifts, double lr, double weight_decay,
                        double momentum, double eps, bool norm_after, bool relu,
                        bool binary_input) {
  at::NoGradGuard no_grad;
  const int64_t depth = int64_t(weights.size());
  TORCH_CHECK(depth >= 1, "mlp_sgd_step: no hidden layer");
  TORCH_CHECK(out_weight.scalar_type() == at::kFloat || out_weight.scalar_type() == at::kDouble,
              "mlp_sgd_step: float32 or float64 weights");
  const int64_t copies = out_weight.size(0);
  TORCH_CHECK(x.dim() == 3 && x.is_contiguous() && x.device().is_cpu() &&
                  (x.size(0) == 1 || x.size(0) == copies),
              "mlp_sgd_step: x must be a contiguous (copies or 1, N, in) CPU tensor");
  TORCH_CHECK(y.dim() == 2 && y.size(0) == copies && y.size(1) == x.size(1) &&
                  y.scalar_type() == at::kLong && y.is_contiguous(),
              "mlp_sgd_step: y must be contiguous (copies, N) int64 labels");
  for (const auto& list : {biases, gammas, betas, running_means, running_vars, counters,
                           noise_scales, noise_shifts})
    TORCH_CHECK(list.empty() || int64_t(list.size()) == depth,
                "mlp_sgd_step: one tensor per hidden layer, or none");
  TORCH_CHECK(gammas.size() == betas.size() && gammas.size() == running_means.size() &&
                  gammas.size() == running_vars.size() && gammas.size() == counters.size(),
              "mlp_sgd_step: a norm needs γ, β, running statistics and a counter per layer");
  TORCH_CHECK(noise_scales.size() == noise_shifts.size() &&
                  (noise_scales.empty() || !gammas.empty()),
              "mlp_sgd_step: noise comes in (scale, shift) pairs, after a norm");
  for (const auto& list : {weights, biases, gammas, betas, running_means, running_vars,
                           noise_scales, noise_shifts})
    for (const auto& t : list) check_tensor(t, out_weight, "every parameter, buffer and noise");
  check_tensor(out_weight, out_weight, "the output weight");
  check_tensor(out_bias, out_weight, "the output bias");
  const Options o{lr, weight_decay, momentum, eps, norm_after, relu, binary_input};
  check_shapes(x, y, weights, biases, out_weight, out_bias, gammas, running_means, running_vars,
               counters, noise_scales, binary_input);
  const std::vector<at::Tensor> w(weights.begin(), weights.end()), b(biases.begin(), biases.end()),
      ga(gammas.begin(), gammas.end()), be(betas.begin(), betas.end()),
      rm(running_means.begin(), running_means.end()), rv(running_vars.begin(), running_vars.end()),
      c(counters.begin(), counters.end()), ns(noise_scales.begin(), noise_scales.end()),
      nm(noise_shifts.begin(), noise_shifts.end());
  return AT_DISPATCH_FLOATING_TYPES(out_weight.scalar_type(), "mlp_sgd_step", [&] {
    return step<scalar_t>(x, y, w, b, out_weight, out_bias, ga, be, rm, rv, c, ns, nm, o);
  });
}

// The step's product kernel on 2-D contiguous float32/float64 CPU tensors, for its tests and the
// benchmark's compute floor: A·B (A = a, or aᵀ with transpose_a), then + bias (a column), or
// fma(alpha, ·, beta·c), or as it is; ATen's operations where the kernel has no build here.
at::Tensor small_matmul(const at::Tensor& a, const at::Tensor& b,
                        const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& c,
                        double beta, double alpha, bool transpose_a) {
  const int64_t m = a.size(transpose_a ? 1 : 0), k = a.size(transpose_a ? 0 : 1), p = b.size(1);
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && b.size(0) == k, "small_matmul: (m, k) @ (k, p)");
  for (const at::Tensor* t : {&a, &b, bias ? &*bias : nullptr, c ? &*c : nullptr})
    TORCH_CHECK(!t || (t->device().is_cpu() && t->is_contiguous() &&
                       t->scalar_type() == a.scalar_type() && !t->requires_grad()),
                "small_matmul: contiguous CPU tensors of one dtype that require no gradient");
  TORCH_CHECK(a.scalar_type() == at::kFloat || a.scalar_type() == at::kDouble,
              "small_matmul: float32 or float64");
  TORCH_CHECK(!(bias && c), "small_matmul: a bias or c, not both");
  TORCH_CHECK(!bias || bias->numel() == m, "small_matmul: one bias per row of the product");
  TORCH_CHECK(!c || (c->size(0) == m && c->size(1) == p), "small_matmul: c is (m, p)");
  const at::Tensor lhs = transpose_a ? a.t() : a;
  if (!small_gemm::available()) {
    if (bias) return at::mm(lhs, b) + bias->view({m, 1});
    if (c) return at::addmm(*c, lhs, b, beta, alpha);
    return at::mm(lhs, b);
  }
  at::Tensor out = c ? c->clone() : at::empty({m, p}, a.options());
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "small_matmul", [&] {
    small_gemm::Epilogue<scalar_t> e;
    if (bias) {
      e.kind = small_gemm::Epilogue<scalar_t>::kAddBias;
      e.bias = bias->const_data_ptr<scalar_t>();
    }
    if (c) {
      e.kind = small_gemm::Epilogue<scalar_t>::kUpdate;
      e.beta = scalar_t(beta), e.alpha = scalar_t(alpha);
    }
    small_gemm::run<scalar_t>({.m = m, .p = p, .k = k, .a = a.const_data_ptr<scalar_t>(),
                               .a_row = transpose_a ? 1 : k, .a_col = transpose_a ? m : 1,
                               .b = b.const_data_ptr<scalar_t>(), .ldb = p,
                               .c = out.data_ptr<scalar_t>(), .ldc = p, .epilogue = e});
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(bn_repro_experiments, m) {
  m.def(
      "small_matmul(Tensor a, Tensor b, Tensor? bias=None, Tensor? c=None, float beta=0., "
      "float alpha=1., bool transpose_a=False) -> Tensor");
  m.def(
      "mlp_sgd_step(Tensor x, Tensor y, Tensor(a!)[] weights, Tensor(b!)[] biases, "
      "Tensor(c!) out_weight, Tensor(d!) out_bias, Tensor(e!)[] gammas, Tensor(f!)[] betas, "
      "Tensor(g!)[] running_means, Tensor(h!)[] running_vars, Tensor(i!)[] counters, "
      "Tensor[] noise_scales, Tensor[] noise_shifts, float lr, float weight_decay, "
      "float momentum, float eps, bool norm_after, bool relu, bool binary_input) -> Tensor");
}

TORCH_LIBRARY_IMPL(bn_repro_experiments, CPU, m) {
  m.impl("mlp_sgd_step", &mlp_sgd_step);
  m.impl("small_matmul", &small_matmul);
}
