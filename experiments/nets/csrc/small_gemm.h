// The fused MNIST step's matrix products: C (M × P) ← epilogue(Σ_k A(i, k)·B[k, :]), for the
// network's small shapes (100 × 100 × 60 and the like), one copy at a time, on one core.
//
// Every element is summed the same way on every CPU: acc = 0, then acc = fma(A(i, k), B[k, j], acc)
// for k = 0, 1, ..., K − 1, then the epilogue in separate multiplies and adds. The AVX-512 and the
// AVX2 builds below differ only in how many elements they carry at once, so they give the same
// bits (tests/experiments/nets/test_mlp_step.py runs both). A library GEMM sums in an order of its
// own, which may change with the CPU and the shape; and on a 2-core AMD EPYC of the Zen 5 family
// (one thread), torch.bmm ran 3 × 100×100×60 at 81 GFLOP/s and 512³ at 107, this kernel at 155
// and 249 (`make bench` measures both).
//
// A(i, k) = a[i·a_row + k·a_col] (any strides: W, or Wᵀ without copying it); B row-major, rows
// ldb apart, P values each; C rows ldc apart.
#pragma once

#include "cpu_isa.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace small_gemm {

// What is written to C[i, j] from acc = Σ_k A(i, k)·B[k, j].
template <typename T>
struct Epilogue {
  enum Kind { kStore, kAddBias, kUpdate } kind = kStore;
  const T* bias = nullptr;  // kAddBias: C = acc + bias[i]
  T beta = 0, alpha = 0;    // kUpdate: C = beta·C + alpha·acc (the SGD step of a weight)
};

template <typename T>
struct Gemm {
  int64_t m, p, k;
  const T* a;
  int64_t a_row, a_col;
  const T* b;
  int64_t ldb;
  T* c;
  int64_t ldc;
  Epilogue<T> epilogue;
};

}  // namespace small_gemm

#if defined(__x86_64__) && defined(__GNUC__)

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

// Runs g with the build cpu_isa() picks; false (nothing done) where there is none.
template <typename T>
bool run(const Gemm<T>& g) {
  switch (cpu_isa()) {
    case Isa::kAvx512:
      avx512::gemm(g);
      return true;
    case Isa::kAvx2:
      avx2::gemm(g);
      return true;
    default:
      return false;
  }
}

}  // namespace small_gemm

#else

namespace small_gemm {
template <typename T>
bool run(const Gemm<T>&) {
  return false;
}
}  // namespace small_gemm

#endif
