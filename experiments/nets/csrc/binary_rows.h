// Sparse helpers for a binary (0/1) input, shared by the binary-input linear layer
// (binary_linear_cpu.cpp) and the fused training step of the MNIST network (mlp_step_cpu.cpp):
// the ones of each row (CSR), the same by column (CSC), and sums of the weight rows they pick.
#pragma once

#include "cpu_isa.h"

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

// The hot loops are compiled for AVX2 and for plain x86-64, one picked at load time (an ifunc: GCC
// or Clang on x86-64 Linux), and the row sums also for AVX-512, picked by cpu_isa(); elsewhere,
// once for the default target.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define BN_REPRO_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#define BN_REPRO_AVX512 __attribute__((target("avx512f,avx512vl")))
#else
#define BN_REPRO_AVX2_CLONES
#endif

namespace {

// The ones of x by row (CSR): row r's pixels are idx[start[r] : start[r + 1]], in increasing order.
// The buffers are sized for the worst case and reused from call to call.
struct Ones {
  std::vector<int32_t> idx;
  std::vector<int64_t> start;
};

template <typename X>
bool is_binary(X v) {
  return v == X(0) || v == X(1);
}

// kBitPositions[m]: the positions of the set bits of the byte m, lowest first (then zeros).
using Positions = std::array<int32_t, 8>;
constexpr std::array<Positions, 256> bit_positions() {
  std::array<Positions, 256> table{};
  for (int m = 0; m < 256; ++m)
    for (int bit = 0, n = 0; bit < 8; ++bit)
      if (m >> bit & 1) table[m][n++] = bit;
  return table;
}
alignas(32) constexpr std::array<Positions, 256> kBitPositions = bit_positions();

// One row of bytes, 8 pixels per 64-bit word and no branch on the pixels: a word's ones become a
// bit mask, and the mask's bit positions eight indices written at once (idx needs 8 spare slots),
// of which the next word's overwrite all but the ones. Returns the number of ones.
BN_REPRO_AVX2_CLONES int64_t find_ones_row(const uint8_t* row, int64_t cols, int32_t* idx,
                                           uint64_t& high_bits) {
  typedef int32_t Indices __attribute__((vector_size(32)));
  constexpr uint64_t kLow = 0x0101010101010101ULL;
  uint64_t high = 0;  // any bit but the lowest of a byte: a value other than 0 and 1
  int64_t count = 0, i = 0;
  for (; i + 8 <= cols; i += 8) {
    uint64_t word;
    std::memcpy(&word, row + i, 8);
    high |= word & ~kLow;
    // The low bit of byte j lands on bit 56 + j: the top byte holds one bit per pixel.
    const uint32_t mask = uint32_t(((word & kLow) * 0x0102040810204080ULL) >> 56);
    Indices indices;
    std::memcpy(&indices, kBitPositions[mask].data(), sizeof(indices));
    indices += int32_t(i);
    std::memcpy(idx + count, &indices, sizeof(indices));
    count += __builtin_popcount(mask);
  }
  for (; i < cols; ++i) {
    high |= row[i] & ~1u;
    idx[count] = int32_t(i);
    count += row[i] != 0;
  }
  high_bits |= high;
  return count;
}

void find_ones(const uint8_t* x, int64_t rows, int64_t cols, Ones& ones) {
  ones.idx.resize(rows * cols + 8);
  ones.start.resize(rows + 1);
  uint64_t high_bits = 0;
  int64_t count = 0;
  ones.start[0] = 0;
  for (int64_t r = 0; r < rows; ++r) {
    count += find_ones_row(x + r * cols, cols, ones.idx.data() + count, high_bits);
    ones.start[r + 1] = count;
  }
  TORCH_CHECK(high_bits == 0, "binary_linear: the input holds a value other than 0 and 1");
}

template <typename X>
void find_ones(const X* x, int64_t rows, int64_t cols, Ones& ones) {
  ones.idx.resize(rows * cols + 8);
  ones.start.resize(rows + 1);
  int64_t count = 0;
  ones.start[0] = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const X* row = x + r * cols;
    for (int64_t i = 0; i < cols; ++i) {
      TORCH_CHECK(is_binary(row[i]), "binary_linear: the input holds a value other than 0 and 1");
      if (row[i] != X(0)) ones.idx[count++] = int32_t(i);
    }
    ones.start[r + 1] = count;
  }
}

// Appends the ones by column (CSC) to `csc`: col_start (cols + 1 values), then by_col, where the
// rows holding pixel i are by_col[col_start[i] : col_start[i + 1]], in increasing order.
void append_by_column(const Ones& ones, int64_t rows, int64_t cols, std::vector<int32_t>& csc) {
  const int64_t nnz = ones.start[rows], base = int64_t(csc.size());
  csc.resize(base + cols + 1 + nnz);
  int32_t* col_start = csc.data() + base;
  int32_t* by_col = col_start + cols + 1;
  std::fill(col_start, col_start + cols + 1, 0);
  for (int64_t p = 0; p < nnz; ++p) ++col_start[ones.idx[p] + 1];
  for (int64_t i = 0; i < cols; ++i) col_start[i + 1] += col_start[i];
  std::vector<int32_t> fill(col_start, col_start + cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t p = ones.start[r]; p < ones.start[r + 1]; ++p)
      by_col[fill[ones.idx[p]]++] = int32_t(r);
}

// acc[o] = Σ_p base[idx[p] * stride + o] for o < width, the whole width in registers: NV vectors
// of VB bytes, then one of VB/2 and one of VB/4 bytes where the width has them (100 floats = 12
// vectors of 32 bytes + 16 bytes, or 6 of 64 bytes + 16 bytes), so each row is read once. Each
// output sums its rows in order, whatever the vector width: every build gives the same numbers.
template <typename T, int NV, int VB>
__attribute__((always_inline)) inline void sum_rows_body(const T* base, const int32_t* idx,
                                                         int64_t count, int64_t stride,
                                                         int64_t width, T* acc) {
  // Unaligned vectors, read and written through pointers; every loop over them unrolled, so the
  // accumulators stay in registers (a loop copying them out becomes a memcpy from the stack).
  typedef T V __attribute__((vector_size(VB), aligned(sizeof(T))));
  typedef T H __attribute__((vector_size(VB / 2), aligned(sizeof(T))));
  typedef T Q __attribute__((vector_size(VB / 4), aligned(sizeof(T))));
  constexpr int64_t L = VB / sizeof(T);
  static_assert(L >= 4, "a quarter vector holds at least one value");
  const int64_t rest = width - NV * L;
  const bool half = rest >= L / 2, quarter = rest - (half ? L / 2 : 0) >= L / 4;
  const int64_t hq = NV * L + (half ? L / 2 : 0);  // where the quarter starts
  V a[NV > 0 ? NV : 1];
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) a[v] = V{};
  H h = {};
  Q q = {};
  for (int64_t p = 0; p < count; ++p) {
    const T* row = base + idx[p] * stride;
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) a[v] += *reinterpret_cast<const V*>(row + v * L);
    if (half) h += *reinterpret_cast<const H*>(row + NV * L);
    if (quarter) q += *reinterpret_cast<const Q*>(row + hq);
  }
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) *reinterpret_cast<V*>(acc + v * L) = a[v];
  if (half) *reinterpret_cast<H*>(acc + NV * L) = h;
  if (quarter) *reinterpret_cast<Q*>(acc + hq) = q;
  for (int64_t o = hq + (quarter ? L / 4 : 0); o < width; ++o) {  // fewer than L / 4 values left
    T sum = 0;
    for (int64_t p = 0; p < count; ++p) sum += base[idx[p] * stride + o];
    acc[o] = sum;
  }
}

template <typename T, int NV>
BN_REPRO_AVX2_CLONES void sum_rows_fixed(const T* base, const int32_t* idx, int64_t count,
                                         int64_t stride, int64_t width, T* acc) {
  sum_rows_body<T, NV, 32>(base, idx, count, stride, width, acc);
}

#ifdef BN_REPRO_AVX512
template <typename T, int NV>
BN_REPRO_AVX512 void sum_rows_wide(const T* base, const int32_t* idx, int64_t count,
                                   int64_t stride, int64_t width, T* acc) {
  sum_rows_body<T, NV, 64>(base, idx, count, stride, width, acc);
}
#endif

// The build of NV vectors of VB bytes.
template <typename T, int VB, int NV>
void sum_rows_in(const T* base, const int32_t* idx, int64_t count, int64_t stride, int64_t width,
                 T* acc) {
#ifdef BN_REPRO_AVX512
  if constexpr (VB == 64)
    sum_rows_wide<T, NV>(base, idx, count, stride, width, acc);
  else
#endif
    sum_rows_fixed<T, NV>(base, idx, count, stride, width, acc);
}

// The sums in vectors of VB bytes: NV fixed at compile time for widths of fewer than 14 vectors,
// wider widths in blocks of 12 vectors (each block a pass over the rows).
template <typename T, int VB>
void sum_rows_by(const T* base, const int32_t* idx, int64_t count, int64_t stride, int64_t width,
                 T* acc) {
  constexpr int64_t L = VB / sizeof(T);
  switch (width / L) {
#define BN_REPRO_CASE(NV) \
  case NV:                \
    return sum_rows_in<T, VB, NV>(base, idx, count, stride, width, acc);
    BN_REPRO_CASE(0) BN_REPRO_CASE(1) BN_REPRO_CASE(2) BN_REPRO_CASE(3) BN_REPRO_CASE(4)
    BN_REPRO_CASE(5) BN_REPRO_CASE(6) BN_REPRO_CASE(7) BN_REPRO_CASE(8) BN_REPRO_CASE(9)
    BN_REPRO_CASE(10) BN_REPRO_CASE(11) BN_REPRO_CASE(12) BN_REPRO_CASE(13)
#undef BN_REPRO_CASE
    default: {
      int64_t o = 0;
      for (; width - o >= 14 * L; o += 12 * L)
        sum_rows_in<T, VB, 12>(base + o, idx, count, stride, 12 * L, acc + o);
      sum_rows_by<T, VB>(base + o, idx, count, stride, width - o, acc + o);
    }
  }
}

// 64-byte vectors where the CPU has AVX-512, else 32-byte ones (the same sums either way).
template <typename T>
void sum_rows(const T* base, const int32_t* idx, int64_t count, int64_t stride, int64_t width,
              T* acc) {
#ifdef BN_REPRO_AVX512
  if (cpu_isa() == Isa::kAvx512) return sum_rows_by<T, 64>(base, idx, count, stride, width, acc);
#endif
  sum_rows_by<T, 32>(base, idx, count, stride, width, acc);
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

// dst (cols × rows) = srcᵀ for a row-major src (rows × cols): contiguous writes, 8 rows of src
// read at a time.
template <typename T>
BN_REPRO_AVX2_CLONES void transpose(const T* src, int64_t rows, int64_t cols, T* dst) {
  int64_t r0 = 0;
  for (; r0 + 8 <= rows; r0 += 8)
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = 0; r < 8; ++r) dst[c * rows + r0 + r] = src[(r0 + r) * cols + c];
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = r0; r < rows; ++r) dst[c * rows + r] = src[r * cols + c];
}

// One copy's binary layer, y[:, n] = Σ_{i ∈ ones(n)} W[i, :] (+ b) for W (in, out) and y
// (out, n_rows), feature-major: one example at a time, its sum held in registers, then one
// transpose.
template <typename T>
void forward_copy(const Ones& ones, int64_t n_rows, const T* w, const T* b, T* y, int64_t out) {
  thread_local std::vector<T> sums;  // (n_rows, out): one example's sums contiguous
  sums.resize(n_rows * out);
  for (int64_t n = 0; n < n_rows; ++n) {
    const int64_t first = ones.start[n];
    sum_rows<T>(w, ones.idx.data() + first, ones.start[n + 1] - first, out, out,
                sums.data() + n * out);
  }
  transpose(sums.data(), n_rows, out, y);
  if (b)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t n = 0; n < n_rows; ++n) y[o * n_rows + n] += b[o];
}

}  // namespace
