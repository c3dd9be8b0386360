// The fused MNIST step's matrix products: C (M × P) ← epilogue(Σ_k A(i, k)·B[k, :]), for the
// network's small shapes (100 × 100 × 60 and the like), one copy at a time, on one core.
//
// Every element is computed the same way on every CPU: acc = 0, then acc = fma(A(i, k), B[k, j],
// acc) for k = 0, 1, ..., K − 1, then the epilogue (C = acc; C = acc + bias[i]; or
// C = fma(alpha, acc, beta·C)), each step an explicit instruction. The AVX-512 and the AVX2 builds
// below differ only in how many elements they carry at once, so they give the same bits
// (tests/experiments/nets/test_mlp_step.py runs both). A library GEMM sums in an order of its own,
// which may change with the CPU and the shape; and on a 2-core AMD EPYC of the Zen 5 family (one
// thread), torch.bmm ran 3 × 100×100×60 at 81 GFLOP/s and 512³ at 107, this kernel at 155 and 249
// (`make bench` floors the step at the faster).
//
// A(i, k) = a[i·a_row + k·a_col] (any strides: W, or Wᵀ without copying it); B row-major, rows
// ldb apart, P values each; C rows ldc apart, never one of the operands.
//
// Built with GCC on x86-64 (its `#pragma GCC target`); elsewhere available() is false and the
// caller uses ATen's products.
#pragma once

#include "cpu_isa.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SMALL_GEMM_BUILT 1
#include <immintrin.h>
#else
#define SMALL_GEMM_BUILT 0
#endif

namespace small_gemm {

// What is written to C[i, j] from acc = Σ_k A(i, k)·B[k, j].
template <typename T>
struct Epilogue {
  enum Kind { kStore, kAddBias, kUpdate } kind = kStore;
  const T* bias = nullptr;  // kAddBias: C = acc + bias[i]
  T beta = 0, alpha = 0;    // kUpdate: C = fma(alpha, acc, beta·C) (the SGD step of a weight)
};

template <typename T>
struct Gemm {
  int64_t m, p, k;  // C is m × p; k terms a sum
  const T* a;
  int64_t a_row, a_col;
  const T* b;
  int64_t ldb;
  T* c;
  int64_t ldc;
  Epilogue<T> epilogue;
};

// Whether run() has a build for this CPU (else the caller uses ATen's products).
inline bool available() { return SMALL_GEMM_BUILT && cpu_isa() != Isa::kNone; }

}  // namespace small_gemm

#if SMALL_GEMM_BUILT

// One kernel text, compiled twice: for AVX-512 (16 floats a vector, 6 rows × 4 vectors of
// accumulators) and for AVX2 with FMA (8 floats, 6 rows × 2 vectors), each in its own namespace.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,fma")
namespace small_gemm::avx512 {
#define SMALL_GEMM_AVX512 1
#include "small_gemm_kernel.inc"
#undef SMALL_GEMM_AVX512
}  // namespace small_gemm::avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace small_gemm::avx2 {
#define SMALL_GEMM_AVX512 0
#include "small_gemm_kernel.inc"
#undef SMALL_GEMM_AVX512
}  // namespace small_gemm::avx2
#pragma GCC pop_options

namespace small_gemm {

// Runs g with the build cpu_isa() picks; only where available().
template <typename T>
void run(const Gemm<T>& g) {
  switch (cpu_isa()) {
    case Isa::kAvx512:
      return avx512::gemm(g);
    case Isa::kAvx2:
      return avx2::gemm(g);
    default:
      TORCH_INTERNAL_ASSERT(false, "small_gemm::run without a build for this CPU");
  }
}

}  // namespace small_gemm

#else

namespace small_gemm {
template <typename T>
void run(const Gemm<T>&) {
  TORCH_INTERNAL_ASSERT(false, "small_gemm::run without a build for this CPU");
}
}  // namespace small_gemm

#endif
