// SPDX-License-Identifier: MIT
#pragma once

// Device number traits (nvcc only): Math<__half> and Math<__nv_bfloat16> with one correctly
// rounded operation per call (the `_rn` intrinsics, which the compiler never contracts; __hfma
// is fused), convert<> specialisations with single conversion instructions, and the mapping
// from Precision to device number type. Math<double> and Math<float> come from arith.h.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kmseg/distance.h"
#include "kmseg/precision.h"

namespace kmseg {

template <>
struct Math<__half> {
  using Storage = __half;
  __host__ __device__ static __half from(double x) { return __double2half(x); }
  __host__ __device__ static double toDouble(__half x) { return double(__half2float(x)); }
  __device__ static __half add(__half a, __half b) { return __hadd_rn(a, b); }
  __device__ static __half sub(__half a, __half b) { return __hsub_rn(a, b); }
  __device__ static __half mul(__half a, __half b) { return __hmul_rn(a, b); }
  __device__ static __half fma(__half a, __half b, __half c) { return __hfma(a, b, c); }
};

template <>
struct Math<__nv_bfloat16> {
  using Storage = __nv_bfloat16;
  __host__ __device__ static __nv_bfloat16 from(double x) { return __double2bfloat16(x); }
  __host__ __device__ static double toDouble(__nv_bfloat16 x) {
    return double(__bfloat162float(x));
  }
  __device__ static __nv_bfloat16 add(__nv_bfloat16 a, __nv_bfloat16 b) { return __hadd_rn(a, b); }
  __device__ static __nv_bfloat16 sub(__nv_bfloat16 a, __nv_bfloat16 b) { return __hsub_rn(a, b); }
  __device__ static __nv_bfloat16 mul(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmul_rn(a, b); }
  __device__ static __nv_bfloat16 fma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
    return __hfma(a, b, c);
  }
};

// Conversions with one instruction where the generic path (by way of double) would take two;
// each gives the same value as the generic one: widening is exact, narrowing rounds once.
template <>
__host__ __device__ inline float convert<float, __half>(__half x) {
  return __half2float(x);
}
template <>
__host__ __device__ inline float convert<float, __nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__host__ __device__ inline __half convert<__half, float>(float x) {
  return __float2half_rn(x);
}
template <>
__host__ __device__ inline __nv_bfloat16 convert<__nv_bfloat16, float>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__host__ __device__ inline float convert<float, float>(float x) {
  return x;
}
template <>
__host__ __device__ inline double convert<double, double>(double x) {
  return x;
}
template <>
__host__ __device__ inline float convert<float, double>(double x) {
  return float(x);
}
template <>
__host__ __device__ inline double convert<double, float>(float x) {
  return double(x);
}

/// The device number type of a precision (void for Precision::None).
template <Precision P>
struct DeviceType {
  using type = void;
};
template <>
struct DeviceType<Precision::Fp64> {
  using type = double;
};
template <>
struct DeviceType<Precision::Fp32> {
  using type = float;
};
template <>
struct DeviceType<Precision::Fp16> {
  using type = __half;
};
template <>
struct DeviceType<Precision::Bf16> {
  using type = __nv_bfloat16;
};

}  // namespace kmseg
