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

// The arithmetic of both 16-bit device types: the `_rn` intrinsics and __hfma are overloaded for
// __half and __nv_bfloat16 alike; only the conversions from and to double differ.
template <class T>
struct MathDevice16 {
  using Storage = T;
  __device__ static T add(T a, T b) { return __hadd_rn(a, b); }
  __device__ static T sub(T a, T b) { return __hsub_rn(a, b); }
  __device__ static T mul(T a, T b) { return __hmul_rn(a, b); }
  __device__ static T fma(T a, T b, T c) { return __hfma(a, b, c); }
};

template <>
struct Math<__half> : MathDevice16<__half> {
  __host__ __device__ static __half from(double x) { return __double2half(x); }
  __host__ __device__ static double toDouble(__half x) { return double(__half2float(x)); }
};

template <>
struct Math<__nv_bfloat16> : MathDevice16<__nv_bfloat16> {
  __host__ __device__ static __nv_bfloat16 from(double x) { return __double2bfloat16(x); }
  __host__ __device__ static double toDouble(__nv_bfloat16 x) {
    return double(__bfloat162float(x));
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

/// a and b rounded to the lanes of T2 (__half2 or __nv_bfloat162): a in the low lane, b in the high
/// lane, each as convert<> rounds it; from float one packing instruction for both.
template <class T2, class W>
__device__ inline T2 convertPair(W a, W b) {
  using L = decltype(T2{}.x);
  return T2{convert<L>(a), convert<L>(b)};
}
template <>
__device__ inline __half2 convertPair<__half2, float>(float a, float b) {
  return __floats2half2_rn(a, b);
}
template <>
__device__ inline __nv_bfloat162 convertPair<__nv_bfloat162, float>(float a, float b) {
  return __floats2bfloat162_rn(a, b);
}

/// An upper bound of sqrt(v) for finite v >= 0 (the fast pass's bounds are finite: kFastMaxAbs),
/// within 2^-19 of it, for the fast pass's pruning margins (which need no more): rsqrtf is within 2
/// ulp (CUDA's documented bound), so v rsqrtf(v) >= sqrt(v) (1 - 2^-22), and the factor 1 + 2^-20,
/// both products rounded up, lifts it above sqrt(v). Five instructions where sqrtf, correctly
/// rounded, takes a refinement and a branch to a slow path. A subnormal v may give +inf (a margin
/// that prunes nothing), never less than sqrt(v). checkCudaSqrtUp tests both claims on the device
/// for every positive float.
__device__ inline float sqrtUp(float v) {
  return v > 0.f ? __fmul_ru(__fmul_ru(v, rsqrtf(v)), 1.f + 0x1p-20f) : 0.f;
}

/// The device number type of a precision (void for Precision::None).
template <Precision P>
struct DeviceType {
  using type = NumberType<P, __half, __nv_bfloat16>;
};

}  // namespace kmseg
