// Batch Renormalization's training step (Batch Renorm paper, Algorithm 1) on (N, C) CPU inputs,
// forward and backward each in one pass over the data.
//
// The same computation as the PyTorch path of bn.BatchRenorm1d (tests/bn/test_compiled.py holds them
// equal); it exists because at the sizes of a fully connected layer, (60, 100) say, that path costs
// about twenty small tensor operations and three autograd nodes per step, several times the cost of
// the arithmetic. See bn/compiled.py for how it is built and when it is used.
//
// Layout: x is (N, C), row-major, N = G microbatches of g = N / G consecutive rows. Statistics are
// per microbatch k and channel j; sums are accumulated in double for float and double inputs.

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Shape {
  int64_t n, c, groups;
  int64_t rows() const { return n / groups; }  // g, the values per channel of a microbatch
};

// Per-microbatch statistics of the forward pass, (G, C) each; kept for the backward pass.
template <typename T>
struct Stats {
  T* mean;    // μ_B
  T* invstd;  // 1 / σ_B, σ_B = sqrt(var_B + ε)
  T* r;       // clip(σ_B / σ, 1/r_max, r_max)
  T* d;       // clip((μ_B − μ) / σ, −d_max, d_max)
};

struct Bounds {
  double eps, r_max, d_max, factor;  // factor: the moving averages' rate α
};

template <typename T>
void renorm_forward(const T* __restrict x, const T* w, const T* b, T* running_mean, T* running_var,
                    T* __restrict y, Stats<T> s, T* r_raw, T* d_raw, Shape shape, Bounds p) {
  const int64_t C = shape.c, g = shape.rows();
  std::vector<double> sum(C), sq(C), scale(C), shift(C), mean_avg(C, 0.0), sigma_avg(C, 0.0);
  double* __restrict ps = sum.data();
  double* __restrict pq = sq.data();
  for (int64_t k = 0; k < shape.groups; ++k) {
    const T* xk = x + k * g * C;
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(sq.begin(), sq.end(), 0.0);
    for (int64_t i = 0; i < g; ++i) {
      const T* __restrict row = xk + i * C;
      for (int64_t j = 0; j < C; ++j) ps[j] += row[j];
    }
    for (int64_t j = 0; j < C; ++j) ps[j] /= g;  // μ_B
    for (int64_t i = 0; i < g; ++i) {            // two passes: no cancellation when |μ_B| >> σ_B
      const T* __restrict row = xk + i * C;
      for (int64_t j = 0; j < C; ++j) {
        const double centered = row[j] - ps[j];
        pq[j] += centered * centered;
      }
    }
    for (int64_t j = 0; j < C; ++j) {
      const int64_t kj = k * C + j;
      const double mean = ps[j], sigma_b = std::sqrt(pq[j] / g + p.eps);
      const double sigma = std::sqrt(double(running_var[j]) + p.eps);
      const double r = sigma_b / sigma, d = (mean - double(running_mean[j])) / sigma;
      const double rc = std::clamp(r, 1.0 / p.r_max, p.r_max), dc = std::clamp(d, -p.d_max, p.d_max);
      r_raw[kj] = T(r);
      d_raw[kj] = T(d);
      s.mean[kj] = T(mean);
      s.invstd[kj] = T(1.0 / sigma_b);
      s.r[kj] = T(rc);
      s.d[kj] = T(dc);
      // y = γ·((x − μ_B)/σ_B · r + d) + β as one multiply-add per value.
      const double gamma = w ? double(w[j]) : 1.0, beta = b ? double(b[j]) : 0.0;
      scale[j] = gamma * rc / sigma_b;
      shift[j] = gamma * (dc - rc * mean / sigma_b) + beta;
      mean_avg[j] += mean / shape.groups;
      sigma_avg[j] += sigma_b / shape.groups;
    }
    const double* __restrict pa = scale.data();
    const double* __restrict pb = shift.data();
    for (int64_t i = 0; i < g; ++i) {
      const T* __restrict row = xk + i * C;
      T* __restrict out = y + (k * g + i) * C;
      for (int64_t j = 0; j < C; ++j) out[j] = T(pa[j] * row[j] + pb[j]);
    }
  }
  // After r and d: μ ← μ + α(μ_B − μ), σ ← σ + α(σ_B − σ), stored as running_var = σ² − ε.
  for (int64_t j = 0; j < C; ++j) {
    double sigma = std::sqrt(double(running_var[j]) + p.eps);
    sigma += p.factor * (sigma_avg[j] - sigma);
    running_mean[j] = T(double(running_mean[j]) + p.factor * (mean_avg[j] - double(running_mean[j])));
    running_var[j] = T(sigma * sigma - p.eps);
  }
}

// BN's backward (BN paper Sec. 3) with x̂ scaled by the constant r: per microbatch and channel,
//   ∂ℓ/∂x = γ·r/σ_B · (∂ℓ/∂y − mean(∂ℓ/∂y) − x̂·mean(∂ℓ/∂y·x̂)),
//   ∂ℓ/∂γ = Σ ∂ℓ/∂y·(x̂·r + d),  ∂ℓ/∂β = Σ ∂ℓ/∂y  (sums over every microbatch).
template <typename T>
void renorm_backward(const T* __restrict dy, const T* __restrict x, const T* w, Stats<T> s,
                     T* __restrict dx, T* dw, T* db, Shape shape) {
  const int64_t C = shape.c, g = shape.rows();
  std::vector<double> sum_dy(C), sum_dy_xc(C), mean(C), coef(C), off(C), slope(C);
  std::vector<double> grad_w(C, 0.0), grad_b(C, 0.0);
  double* __restrict p1 = sum_dy.data();
  double* __restrict p2 = sum_dy_xc.data();
  double* __restrict pm = mean.data();
  for (int64_t k = 0; k < shape.groups; ++k) {
    const T* xk = x + k * g * C;
    const T* dyk = dy + k * g * C;
    std::fill(sum_dy.begin(), sum_dy.end(), 0.0);
    std::fill(sum_dy_xc.begin(), sum_dy_xc.end(), 0.0);
    for (int64_t j = 0; j < C; ++j) pm[j] = s.mean[k * C + j];
    for (int64_t i = 0; i < g; ++i) {
      const T* __restrict row = xk + i * C;
      const T* __restrict grow = dyk + i * C;
      for (int64_t j = 0; j < C; ++j) {
        const double gy = grow[j];
        p1[j] += gy;
        p2[j] += gy * (double(row[j]) - pm[j]);
      }
    }
    for (int64_t j = 0; j < C; ++j) {
      const int64_t kj = k * C + j;
      const double invstd = s.invstd[kj], r = s.r[kj];
      const double sum_dy_xhat = p2[j] * invstd;
      grad_b[j] += p1[j];
      grad_w[j] += r * sum_dy_xhat + double(s.d[kj]) * p1[j];
      coef[j] = (w ? double(w[j]) : 1.0) * r * invstd;
      off[j] = p1[j] / g;
      slope[j] = sum_dy_xhat * invstd / g;
    }
    if (dx) {
      const double* __restrict pa = coef.data();
      const double* __restrict pb = off.data();
      const double* __restrict pc = slope.data();
      for (int64_t i = 0; i < g; ++i) {
        const T* __restrict row = xk + i * C;
        const T* __restrict grow = dyk + i * C;
        T* __restrict out = dx + (k * g + i) * C;
        for (int64_t j = 0; j < C; ++j)
          out[j] = T(pa[j] * (double(grow[j]) - pb[j] - (double(row[j]) - pm[j]) * pc[j]));
      }
    }
  }
  for (int64_t j = 0; j < C; ++j) {
    if (dw) dw[j] = T(grad_w[j]);
    if (db) db[j] = T(grad_b[j]);
  }
}

template <typename T>
Stats<T> stats_of(const at::Tensor& stats) {  // stats: (4, G, C)
  T* p = stats.data_ptr<T>();
  const int64_t gc = stats.size(1) * stats.size(2);
  return {p, p + gc, p + 2 * gc, p + 3 * gc};
}

template <typename T>
T* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// The same gradients as renorm_backward in differentiable ATen operations, for a backward pass
// that is itself differentiated (gradient penalties, meta-learning): μ_B and σ_B are recomputed
// from x so that their dependence on x is kept; r and d stay constants (stop_gradient).
// Returns {dx, dw, db}; dw is meaningful only when w is defined.
std::vector<at::Tensor> differentiable_backward(const at::Tensor& dy, const at::Tensor& x,
                                                const at::Tensor& w, const at::Tensor& stats,
                                                Shape shape, double eps) {
  const auto xv = x.view({shape.groups, shape.rows(), shape.c});
  const auto dyv = dy.reshape({shape.groups, shape.rows(), shape.c});
  const auto centered = xv - xv.mean({1}, true);
  const auto invstd = (centered.square().mean({1}, true) + eps).rsqrt();
  const auto x_hat = centered * invstd;
  const auto r = stats[2].unsqueeze(1), d = stats[3].unsqueeze(1);  // (G, 1, C)
  const auto dx_hat = (w.defined() ? dyv * w : dyv) * r;
  const auto dx = invstd * (dx_hat - dx_hat.mean({1}, true) -
                            x_hat * (dx_hat * x_hat).mean({1}, true));
  const std::vector<int64_t> rows{0, 1};  // a named list: torch 2.11's overloads find `{0, 1}` ambiguous
  return {dx.view_as(x), (dyv * (x_hat * r + d)).sum(rows), dyv.sum(rows)};
}

struct RenormTrain : public torch::autograd::Function<RenormTrain> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x,
                               const std::optional<at::Tensor>& weight,
                               const std::optional<at::Tensor>& bias, at::Tensor running_mean,
                               at::Tensor running_var, int64_t groups, double eps, double r_max,
                               double d_max, double factor) {
    TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.device().is_cpu(),
                "bn_repro::renorm_train expects a contiguous (N, C) CPU tensor");
    const Shape shape{x.size(0), x.size(1), groups};
    TORCH_CHECK(groups >= 1 && shape.n % groups == 0, "groups must divide the batch size");
    for (const at::Tensor* t : {&running_mean, &running_var})
      TORCH_CHECK(t->is_contiguous() && t->numel() == shape.c && t->dtype() == x.dtype(),
                  "running statistics must be contiguous (C,) tensors of the input's dtype");
    for (const auto* t : {&weight, &bias})
      TORCH_CHECK(!t->has_value() || ((*t)->is_contiguous() && (*t)->numel() == shape.c &&
                                      (*t)->dtype() == x.dtype()),
                  "weight and bias must be contiguous (C,) tensors of the input's dtype");
    auto y = at::empty_like(x);
    auto stats = at::empty({4, groups, shape.c}, x.options());
    auto r_raw = at::empty({groups, shape.c}, x.options());
    auto d_raw = at::empty({groups, shape.c}, x.options());
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "renorm_forward", [&] {
      renorm_forward<scalar_t>(
          x.const_data_ptr<scalar_t>(), weight ? weight->const_data_ptr<scalar_t>() : nullptr,
          bias ? bias->const_data_ptr<scalar_t>() : nullptr, running_mean.data_ptr<scalar_t>(),
          running_var.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), stats_of<scalar_t>(stats),
          r_raw.data_ptr<scalar_t>(), d_raw.data_ptr<scalar_t>(), shape,
          Bounds{eps, r_max, d_max, factor});
    });
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x, weight.value_or(at::Tensor()), stats});
    ctx->saved_data["groups"] = groups;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["has_bias"] = bias.has_value();
    ctx->mark_non_differentiable({r_raw, d_raw});
    return {y, r_raw, d_raw};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(10);
    if (!grads[0].defined()) return out;
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &stats = saved[2];
    const Shape shape{x.size(0), x.size(1), ctx->saved_data["groups"].toInt()};
    if (at::GradMode::is_enabled()) {  // the backward pass will be differentiated (create_graph)
      const auto g = differentiable_backward(grads[0], x, w, stats, shape,
                                             ctx->saved_data["eps"].toDouble());
      out[0] = g[0];
      if (w.defined()) out[1] = g[1];
      if (ctx->saved_data["has_bias"].toBool()) out[2] = g[2];
      return out;
    }
    const auto dy = grads[0].contiguous();
    at::Tensor dx = ctx->needs_input_grad(0) ? at::empty_like(x) : at::Tensor();
    at::Tensor dw = w.defined() && ctx->needs_input_grad(1) ? at::empty({shape.c}, x.options())
                                                             : at::Tensor();
    at::Tensor db = ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)
                        ? at::empty({shape.c}, x.options())
                        : at::Tensor();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "renorm_backward", [&] {
      renorm_backward<scalar_t>(dy.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(),
                                w.defined() ? w.const_data_ptr<scalar_t>() : nullptr,
                                stats_of<scalar_t>(stats), data_or_null<scalar_t>(dx),
                                data_or_null<scalar_t>(dw), data_or_null<scalar_t>(db), shape);
    });
    out[0] = dx;
    out[1] = dw;
    out[2] = db;
    return out;
  }
};

std::vector<at::Tensor> renorm_train(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                                     const std::optional<at::Tensor>& bias,
                                     at::Tensor running_mean, at::Tensor running_var,
                                     int64_t groups, double eps, double r_max, double d_max,
                                     double factor) {
  return RenormTrain::apply(x, weight, bias, running_mean, running_var, groups, eps, r_max, d_max,
                            factor);
}

}  // namespace

TORCH_LIBRARY(bn_repro, m) {
  m.def(
      "renorm_train(Tensor x, Tensor? weight, Tensor? bias, Tensor(a!) running_mean, "
      "Tensor(b!) running_var, int groups, float eps, float r_max, float d_max, float factor) "
      "-> Tensor[]");
}

TORCH_LIBRARY_IMPL(bn_repro, CompositeImplicitAutograd, m) {
  m.impl("renorm_train", &renorm_train);
}
