// The instruction set the MNIST network's kernels are built for at run time.
#pragma once

#include <ATen/Version.h>

#include <string>

// Which build of a kernel runs: the one matching the instruction set torch's own kernels use (so
// ATEN_CPU_CAPABILITY=avx2 selects the AVX2 build and =default none, as they do torch's): AVX-512,
// AVX2 with FMA, or none (the caller then uses ATen's products, which round differently).
enum class Isa { kNone, kAvx2, kAvx512 };

inline Isa cpu_isa() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const Isa chosen = [] {
    __builtin_cpu_init();
    const std::string torch_uses = at::get_cpu_capability();
    const bool avx512 = torch_uses == "AVX512", avx2 = avx512 || torch_uses == "AVX2";
    if (avx2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      if (avx512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
        return Isa::kAvx512;
      return Isa::kAvx2;
    }
    return Isa::kNone;
  }();
  return chosen;
#else
  return Isa::kNone;
#endif
}
