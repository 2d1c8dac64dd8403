// Vector arithmetic of the CPU attention kernel (`cpu_attention.cc`): GCC
// vector extensions one register wide, and the row operations the kernel
// builds on. Everything is in the kernel's anonymous namespace.

#ifndef ZOO_MODELS_CPU_ATTENTION_SIMD_H_
#define ZOO_MODELS_CPU_ATTENTION_SIMD_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace {

// Vectors of one register: 16 lanes with AVX-512, else 8 (GCC lowers
// them to whatever the host has).
#ifdef __AVX512F__
constexpr int kLanes = 16;
#else
constexpr int kLanes = 8;
#endif
typedef float fv __attribute__((vector_size(kLanes * 4)));
typedef int32_t iv __attribute__((vector_size(kLanes * 4)));
typedef uint32_t uv __attribute__((vector_size(kLanes * 4)));
typedef uint8_t bv __attribute__((vector_size(kLanes)));

inline fv Splat(float x) {
#if defined(__AVX512F__)
  return reinterpret_cast<fv>(_mm512_set1_ps(x));
#elif defined(__AVX__)
  return reinterpret_cast<fv>(_mm256_set1_ps(x));
#else
  fv v;
  for (int k = 0; k < kLanes; ++k) v[k] = x;
  return v;
#endif
}

inline float Sum(fv x) {
  float s = 0.0f;
  for (int j = 0; j < kLanes; ++j) s += x[j];
  return s;
}

// The lanes of row x where the mask row m is false, set to
// `value`; the row's tail past S (not a whole vector) lane by lane.
inline void Masked(const bool* m, int64_t S, float value, fv* x) {
  int64_t j = 0;
  for (; (j + 1) * kLanes <= S; ++j) {
    bv bytes;
    std::memcpy(&bytes, m + j * kLanes, kLanes);
    const iv keep = __builtin_convertvector(bytes, iv);
    x[j] = keep != 0 ? x[j] : Splat(value);
  }
  float* xs = reinterpret_cast<float*>(x);
  for (int64_t s = j * kLanes; s < S; ++s) xs[s] = m[s] ? xs[s] : value;
}

inline uv Mix32(uv x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  return x ^ (x >> 16);
}

// exp of softmax arguments (<= 0): Cody-Waite reduction and a degree-6
// polynomial, accurate to about 1 ulp; below -87 it returns 0.
inline fv Exp(fv x) {
  const fv lo = Splat(-87.0f);
  x = x < lo ? lo : x;
  const fv magic = Splat(12582912.0f);  // 1.5 * 2**23: rounds to integer
  fv n = (x * 1.44269504088896341f + magic) - magic;
  fv r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  fv p = Splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  iv e = (__builtin_convertvector(n, iv) + 127) << 23;
  fv out = p * reinterpret_cast<fv&>(e);
  return x <= lo ? fv{} : out;
}

template <int U>
inline void ProductBlock(const float* x, const fv* m, int64_t H, int64_t SV,
                         int64_t j0, fv* out) {
  fv acc[U] = {};
  for (int64_t h = 0; h < H; ++h) {
    const fv xh = Splat(x[h]);
    const fv* mh = m + h * SV + j0;
    for (int u = 0; u < U; ++u) acc[u] += xh * mh[u];
  }
  for (int u = 0; u < U; ++u) out[j0 + u] = acc[u];
}

// out[j] = sum_h x[h] m[h, j] for the first `len` of the SV vectors of m's
// rows: blocks of up to eight vectors kept in registers while h runs.
inline void RowProduct(const float* x, const fv* m, int64_t H, int64_t SV,
                       int64_t len, fv* out) {
  int64_t j0 = 0;
  for (; j0 + 8 <= len; j0 += 8) ProductBlock<8>(x, m, H, SV, j0, out);
  if (j0 + 4 <= len) ProductBlock<4>(x, m, H, SV, j0, out), j0 += 4;
  if (j0 + 2 <= len) ProductBlock<2>(x, m, H, SV, j0, out), j0 += 2;
  if (j0 < len) ProductBlock<1>(x, m, H, SV, j0, out);
}

// How many vectors of a row reach its last key that may be attended: the
// rest are masked, and their probabilities are exactly 0 (all SV vectors
// when no key may be: that row's probabilities are uniform).
inline int64_t Reach(const bool* m, int64_t S, int64_t SV) {
  int64_t last = S - 1;
  for (; last >= 8; last -= 8) {
    uint64_t bytes;
    std::memcpy(&bytes, m + last - 7, 8);
    if (bytes) break;
  }
  for (; last >= 0 && !m[last]; --last) {}
  return last < 0 ? SV : last / kLanes + 1;
}

// out[h] = sum_s w[s] x[s, h] over the first `len` vectors of w (x's
// padding rows hold zeros); U interleaved sums hide the add latency.
template <int HV>
inline void WeightedSum(const float* w, const fv* x, int64_t len, fv* out) {
  constexpr int U = HV <= 2 ? 4 : HV <= 4 ? 2 : 1;
  fv acc[U][HV] = {};
  for (int64_t s = 0; s < len * kLanes; s += U)
    for (int u = 0; u < U; ++u) {
      const fv ws = Splat(w[s + u]);
      const fv* xs = x + (s + u) * HV;
      for (int h = 0; h < HV; ++h) acc[u][h] += ws * xs[h];
    }
  for (int h = 0; h < HV; ++h) {
    out[h] = acc[0][h];
    for (int u = 1; u < U; ++u) out[h] += acc[u][h];
  }
}

}  // namespace

#endif  // ZOO_MODELS_CPU_ATTENTION_SIMD_H_
