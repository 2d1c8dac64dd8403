// Vector arithmetic of the CPU kernels: GCC vector extensions one register
// wide, the row operations the attention kernel (`cpu_attention.cc`) builds
// on, and the strided float transpose it shares with `cpu_transpose.cc`.
// Everything is in the including kernel's anonymous namespace. The inner
// blocks are forced inline: called out of line at the harness's small head
// sizes, each paid a call, a zeroed accumulator array and its spills.

#ifndef ZOO_MODELS_CPU_ATTENTION_SIMD_H_
#define ZOO_MODELS_CPU_ATTENTION_SIMD_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace {

#define ZOO_INLINE inline __attribute__((always_inline))

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

// The sum and the maximum of x's lanes, as a tree of shuffles.
inline float Sum(fv x) {
#if defined(__AVX512F__)
  return _mm512_reduce_add_ps(reinterpret_cast<__m512>(x));
#elif defined(__AVX__)
  const __m256 v = reinterpret_cast<__m256>(x);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
#else
  float s = 0.0f;
  for (int j = 0; j < kLanes; ++j) s += x[j];
  return s;
#endif
}

inline float Max(fv x) {
#if defined(__AVX512F__)
  return _mm512_reduce_max_ps(reinterpret_cast<__m512>(x));
#elif defined(__AVX__)
  const __m256 v = reinterpret_cast<__m256>(x);
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
#else
  float m = x[0];
  for (int j = 1; j < kLanes; ++j) m = m > x[j] ? m : x[j];
  return m;
#endif
}

// kLanes bytes widened to 32-bit lanes (one instruction, where the
// generic conversion goes byte by byte).
inline iv Widen(const bool* m) {
#if defined(__AVX512F__)
  return reinterpret_cast<iv>(_mm512_cvtepu8_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(m))));
#elif defined(__AVX2__)
  return reinterpret_cast<iv>(_mm256_cvtepu8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(m))));
#else
  bv bytes;
  std::memcpy(&bytes, m, kLanes);
  return __builtin_convertvector(bytes, iv);
#endif
}

// The lanes of row x where the mask row m is false, set to
// `value`; the row's tail past S (not a whole vector) lane by lane.
inline void Masked(const bool* m, int64_t S, float value, fv* x) {
  int64_t j = 0;
  for (; (j + 1) * kLanes <= S; ++j) {
    const iv keep = Widen(m + j * kLanes);
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
ZOO_INLINE fv Exp(fv x) {
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

// Vector registers of the host (32 with AVX-512, else 16), and how many
// accumulators a block keeps: half of them.
constexpr int kRegisters = kLanes == 16 ? 32 : 16;
constexpr int kAccumulators = kRegisters / 2;

template <int R, int U>
ZOO_INLINE void ProductBlock(const float* x, int64_t xs, const fv* m, int64_t H,
                             int64_t SV, int64_t j0, fv* out) {
  fv acc[R][U] = {};
  for (int64_t h = 0; h < H; ++h) {
    fv mh[U];
    for (int u = 0; u < U; ++u) mh[u] = m[h * SV + j0 + u];
    for (int r = 0; r < R; ++r) {
      const fv xh = Splat(x[r * xs + h]);
      for (int u = 0; u < U; ++u) acc[r][u] += xh * mh[u];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < U; ++u) out[r * SV + j0 + u] = acc[r][u];
}

// out[r, j] = sum_h x[r, h] m[h, j] for R rows of x (row stride xs floats)
// and the first `len` of the SV vectors of m's rows (out's row stride SV):
// an R x U block of vectors kept in registers while h runs, so each vector
// of m loaded serves all R rows.
template <int R>
inline void RowsProduct(const float* x, int64_t xs, const fv* m, int64_t H,
                        int64_t SV, int64_t len, fv* out) {
  // With AVX2, as many vectors of m as its 16 registers hold beside R * U
  // accumulators and a broadcast of x (3 for R = 4, measured faster than
  // 2); AVX-512 keeps the blocks of half its registers measured there.
  constexpr int U =
      kLanes == 16 ? kAccumulators / R : (kRegisters - 1) / (R + 1);
  int64_t j0 = 0;
  for (; j0 + U <= len; j0 += U)
    ProductBlock<R, U>(x, xs, m, H, SV, j0, out);
  for (; j0 < len; ++j0) ProductBlock<R, 1>(x, xs, m, H, SV, j0, out);
}

template <int V, int U>
ZOO_INLINE void OuterBlock(const float* x, int64_t xs, const fv* m, int64_t SV,
                           int64_t R, int64_t h0, int64_t j0, fv* out) {
  fv acc[V][U];
  for (int v = 0; v < V; ++v)
    for (int u = 0; u < U; ++u) acc[v][u] = out[(h0 + v) * SV + j0 + u];
  for (int64_t r = 0; r < R; ++r) {
    fv mr[U];
    for (int u = 0; u < U; ++u) mr[u] = m[r * SV + j0 + u];
    for (int v = 0; v < V; ++v) {
      const fv xv = Splat(x[r * xs + h0 + v]);
      for (int u = 0; u < U; ++u) acc[v][u] += xv * mr[u];
    }
  }
  for (int v = 0; v < V; ++v)
    for (int u = 0; u < U; ++u) out[(h0 + v) * SV + j0 + u] = acc[v][u];
}

template <int V>
inline void OuterRows(const float* x, int64_t xs, const fv* m, int64_t SV,
                      int64_t R, int64_t h0, int64_t len, fv* out) {
  constexpr int U = kAccumulators / 4;
  int64_t j0 = 0;
  for (; j0 + U <= len; j0 += U)
    OuterBlock<V, U>(x, xs, m, SV, R, h0, j0, out);
  for (; j0 < len; ++j0) OuterBlock<V, 1>(x, xs, m, SV, R, h0, j0, out);
}

// out[h, j] += sum_r x[r, h] m[r, j] for R rows (x's row stride xs floats,
// m's SV vectors), h < H and the first `len` vectors j (out [H, SV]): a
// block of out kept in registers while r runs.
inline void OuterProduct(const float* x, int64_t xs, const fv* m, int64_t H,
                         int64_t SV, int64_t R, int64_t len, fv* out) {
  int64_t h0 = 0;
  for (; h0 + 4 <= H; h0 += 4) OuterRows<4>(x, xs, m, SV, R, h0, len, out);
  for (; h0 < H; ++h0) OuterRows<1>(x, xs, m, SV, R, h0, len, out);
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

template <int HV, int R>
ZOO_INLINE void WeightedBlock(const float* w, int64_t ws, const fv* x,
                              int64_t len, fv* out) {
  constexpr int U = std::max(1, std::min(4, kAccumulators / (R * HV)));
  fv acc[U][R][HV] = {};
  for (int64_t s = 0; s < len * kLanes; s += U)
    for (int u = 0; u < U; ++u) {
      const fv* xs = x + (s + u) * HV;
      for (int r = 0; r < R; ++r) {
        const fv wr = Splat(w[r * ws + s + u]);
        for (int h = 0; h < HV; ++h) acc[u][r][h] += wr * xs[h];
      }
    }
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < HV; ++h) {
      out[r * HV + h] = acc[0][r][h];
      for (int u = 1; u < U; ++u) out[r * HV + h] += acc[u][r][h];
    }
}

// out[r, h] = sum_s w[r, s] x[s, h] for R rows of w (row stride ws floats)
// over its first `len` vectors (x's padding rows hold zeros), out's row
// stride HV: as many rows at a time as the accumulators hold, so each
// vector of x loaded serves them all, and U interleaved sums hide the add
// latency.
template <int HV, int R>
inline void RowsWeightedSum(const float* w, int64_t ws, const fv* x,
                            int64_t len, fv* out) {
  constexpr int P = R * HV <= kAccumulators ? R
                    : 2 * HV <= kAccumulators ? 2 : 1;
  for (int r = 0; r < R; r += P)
    WeightedBlock<HV, P>(w + r * ws, ws, x, len, out + r * HV);
}

#ifdef __AVX__
// The 8 x 8 float block at `in` (row stride ldi) to `out` (row stride ldo),
// transposed in registers.
inline void Transpose8(const float* in, int64_t ldi, float* out, int64_t ldo) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(in + i * ldi);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(out + i * ldo,
                     _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(out + (i + 4) * ldo,
                     _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}
#endif

// out[c, r] = in[r, c] for r < rows, c < cols (row strides ldi and ldo):
// whole 8 x 8 blocks through register transposes, the edges one by one.
inline void Transpose(const float* in, int64_t rows, int64_t cols,
                      int64_t ldi, float* out, int64_t ldo) {
  int64_t r8 = 0, c8 = 0;
#ifdef __AVX__
  r8 = rows / 8 * 8, c8 = cols / 8 * 8;
  for (int64_t r = 0; r < r8; r += 8)
    for (int64_t c = 0; c < c8; c += 8)
      Transpose8(in + r * ldi + c, ldi, out + c * ldo + r, ldo);
#endif
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = r < r8 ? c8 : 0; c < cols; ++c)
      out[c * ldo + r] = in[r * ldi + c];
}

}  // namespace

#endif  // ZOO_MODELS_CPU_ATTENTION_SIMD_H_
