// Dense attention on CPU, forward and backward, one (batch row, head) at a
// time, every [T, S] row of probabilities kept in cache: the logits, mask,
// softmax, dropout and both products of a query row are computed together,
// where XLA:CPU runs each as its own pass over a [B, N, T, S] array.
//
// The numbers are those of `zoo.models.layers._dense_attention` up to float
// rounding: logits (q * scale) . k + bias, masked logits set to -1e9 (a query
// with no key gets a uniform row), softmax, inverted dropout whose keep bit
// is `zoo.models.dropout`'s counter hash of the probability's flat index,
// then the product with v. The backward pass recomputes each row.
//
// Shapes: q [B, T, N, H], k and v [B, S, N, H], mask bool [B|1, N|1, T, S],
// bias float32 [B|1, N|1, T, S], seeds uint32 [2], row_base uint32 [B] and
// head_base uint32 [N] (the flat index of element (b, n, 0, 0) is
// row_base[b] + head_base[n], which lets a shard of the batch or of the
// heads draw the global mask).

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr float kMaskValue = -1e9f;
constexpr int kRows = 4;  // query rows whose dk, dv updates go together
constexpr float kPadValue = -3e38f;  // a padding key: exp gives exactly 0

// Eight lanes; GCC lowers these to AVX2 or AVX-512 (or SSE pairs).
typedef float f8 __attribute__((vector_size(32)));
typedef int32_t i8 __attribute__((vector_size(32)));
typedef uint32_t u8 __attribute__((vector_size(32)));

struct Dims {
  int64_t B, T, S, N, H;
  int64_t mask_b, mask_n, bias_b, bias_n;  // 0 = broadcast, else the dim
  int64_t SV, HV;  // S and H in vectors of 8, rounded up
};

struct Args {
  Dims d;
  const float *q, *k, *v, *bias, *dout;
  const bool* mask;
  uint32_t seed0, seed1, threshold;
  const uint32_t *row_base, *head_base;
  float scale, keep_scale;
  bool dropout;
  float *out, *dq, *dk, *dv, *ds;
};

inline f8 Splat(float x) { return f8{} + x; }

inline float Sum(f8 x) {
  float s = 0.0f;
  for (int j = 0; j < 8; ++j) s += x[j];
  return s;
}

inline u8 Mix32(u8 x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  return x ^ (x >> 16);
}

// exp of softmax arguments (<= 0): Cody-Waite reduction and a degree-6
// polynomial, accurate to about 1 ulp; below -87 it returns 0.
inline f8 Exp(f8 x) {
  const f8 lo = Splat(-87.0f);
  x = x < lo ? lo : x;
  const f8 magic = Splat(12582912.0f);  // 1.5 * 2**23: rounds to integer
  f8 n = (x * 1.44269504088896341f + magic) - magic;
  f8 r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  f8 p = Splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  i8 e = (__builtin_convertvector(n, i8) + 127) << 23;
  f8 out = p * reinterpret_cast<f8&>(e);
  return x <= lo ? f8{} : out;
}

// The (b, n) tile's operands, copied out of their strided layouts and
// padded with zeros to whole vectors: q scaled [T, HV], k and v [S, HV],
// their transposes [H, SV]; then one query row's scratch.
struct Tile {
  std::vector<f8> q, k, v, kt, vt, row, p, pd, dp, acc, dk, dv, pdb, dsb, gb;
  std::vector<i8> keep;
  explicit Tile(const Dims& d)
      : q(d.T * d.HV), k(d.SV * 8 * d.HV), v(d.SV * 8 * d.HV),
        kt(d.H * d.SV), vt(d.H * d.SV), row(d.SV), p(d.SV), pd(d.SV),
        dp(d.SV), acc(d.HV), dk(d.SV * 8 * d.HV), dv(d.SV * 8 * d.HV),
        pdb(kRows * d.SV), dsb(kRows * d.SV), gb(kRows * d.HV),
        keep(d.SV) {}
};

inline float* F(std::vector<f8>& x) {
  return reinterpret_cast<float*>(x.data());
}

void Load(const Args& a, int64_t b, int64_t n, Tile& t) {
  const Dims& d = a.d;
  const int64_t HP = d.HV * 8, SP = d.SV * 8;
  float *q = F(t.q), *k = F(t.k), *v = F(t.v), *kt = F(t.kt), *vt = F(t.vt);
  for (int64_t i = 0; i < d.T; ++i) {
    const float* src = a.q + ((b * d.T + i) * d.N + n) * d.H;
    for (int64_t h = 0; h < d.H; ++h) q[i * HP + h] = src[h] * a.scale;
  }
  for (int64_t s = 0; s < d.S; ++s) {
    const int64_t off = ((b * d.S + s) * d.N + n) * d.H;
    for (int64_t h = 0; h < d.H; ++h) {
      k[s * HP + h] = kt[h * SP + s] = a.k[off + h];
      v[s * HP + h] = vt[h * SP + s] = a.v[off + h];
    }
  }
}

inline int64_t Offset(const Dims& d, bool per_b, bool per_n, int64_t b,
                      int64_t n, int64_t i) {
  return (((per_b ? b : 0) * (per_n ? d.N : 1) + (per_n ? n : 0)) * d.T +
          i) * d.S;
}

// out[j] = sum_h x[h] m[h, j] for j < SV vectors: blocks of eight vectors
// kept in registers while h runs.
inline void RowProduct(const float* x, const f8* m, int64_t H, int64_t SV,
                       f8* out) {
  int64_t j0 = 0;
  for (; j0 + 8 <= SV; j0 += 8) {
    f8 acc[8] = {};
    for (int64_t h = 0; h < H; ++h) {
      const f8 xh = Splat(x[h]);
      const f8* mh = m + h * SV + j0;
      for (int u = 0; u < 8; ++u) acc[u] += xh * mh[u];
    }
    for (int u = 0; u < 8; ++u) out[j0 + u] = acc[u];
  }
  for (; j0 < SV; ++j0) {
    f8 acc{};
    for (int64_t h = 0; h < H; ++h) acc += Splat(x[h]) * m[h * SV + j0];
    out[j0] = acc;
  }
}

// Query row i's probabilities before (p) and after (pd) dropout, and the
// keep bits (dropout only).
void Row(const Args& a, int64_t b, int64_t n, int64_t i, Tile& t) {
  const Dims& d = a.d;
  const int64_t SV = d.SV, S = d.S;
  f8* row = t.row.data();
  RowProduct(F(t.q) + i * d.HV * 8, t.kt.data(), d.H, SV, row);
  float* r = F(t.row);
  if (a.bias) {
    const float* br = a.bias + Offset(d, d.bias_b, d.bias_n, b, n, i);
    for (int64_t s = 0; s < S; ++s) r[s] += br[s];
  }
  if (a.mask) {
    const bool* mr = a.mask + Offset(d, d.mask_b, d.mask_n, b, n, i);
    for (int64_t s = 0; s < S; ++s) r[s] = mr[s] ? r[s] : kMaskValue;
  }
  for (int64_t s = S; s < SV * 8; ++s) r[s] = kPadValue;
  f8 mx = row[0];
  for (int64_t j = 1; j < SV; ++j) mx = mx > row[j] ? mx : row[j];
  float m = mx[0];
  for (int k = 1; k < 8; ++k) m = std::max(m, mx[k]);
  const f8 m8 = Splat(m);
  f8 sum{};
  f8* p = t.p.data();
  for (int64_t j = 0; j < SV; ++j) {
    p[j] = Exp(row[j] - m8);
    sum += p[j];
  }
  const f8 total = Splat(Sum(sum));
  for (int64_t j = 0; j < SV; ++j) p[j] = p[j] / total;
  f8* pd = t.pd.data();
  if (!a.dropout) {
    std::copy(p, p + SV, pd);
    return;
  }
  const uint32_t base = a.row_base[b] + a.head_base[n] +
                        static_cast<uint32_t>(i * S);
  const u8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
  const f8 ks = Splat(a.keep_scale);
  for (int64_t j = 0; j < SV; ++j) {
    const u8 idx = base + static_cast<uint32_t>(j * 8) + lane;
    const u8 bits = Mix32(Mix32(idx ^ a.seed0) + a.seed1);
    t.keep[j] = bits >= a.threshold;
    pd[j] = t.keep[j] ? p[j] * ks : f8{};
  }
}

// out[h] = sum_s w[s] x[s, h] for h < 8 HV, over s < 8 SV (the padding
// rows hold zeros); U interleaved sums hide the add latency.
template <int HV>
inline void WeightedSum(const float* w, const f8* x, int64_t SV, f8* out) {
  constexpr int U = HV <= 2 ? 4 : HV <= 4 ? 2 : 1;
  f8 acc[U][HV] = {};
  for (int64_t s = 0; s < SV * 8; s += U)
    for (int u = 0; u < U; ++u) {
      const f8 ws = Splat(w[s + u]);
      const f8* xs = x + (s + u) * HV;
      for (int h = 0; h < HV; ++h) acc[u][h] += ws * xs[h];
    }
  for (int h = 0; h < HV; ++h) {
    out[h] = acc[0][h];
    for (int u = 1; u < U; ++u) out[h] += acc[u][h];
  }
}

template <int HV>
void Forward(const Args& a, int64_t item, Tile& t) {
  const Dims& d = a.d;
  const int64_t b = item / d.N, n = item % d.N;
  Load(a, b, n, t);
  for (int64_t i = 0; i < d.T; ++i) {
    Row(a, b, n, i, t);
    WeightedSum<HV>(F(t.pd), t.v.data(), d.SV, t.acc.data());
    std::copy(F(t.acc), F(t.acc) + d.H,
              a.out + ((b * d.T + i) * d.N + n) * d.H);
  }
}

// Row i's share of the backward pass: its dq, and its pd and ds rows (and
// g, q) left in block slot r for the dk, dv update.
template <int HV>
void BackwardRow(const Args& a, int64_t b, int64_t n, int64_t i, int r,
                 Tile& t) {
  const Dims& d = a.d;
  const int64_t S = d.S, H = d.H, SV = d.SV;
  Row(a, b, n, i, t);
  const float* gi = a.dout + ((b * d.T + i) * d.N + n) * H;
  f8* g = t.gb.data() + r * HV;
  std::copy(gi, gi + H, reinterpret_cast<float*>(g));
  f8* dp = t.dp.data();
  RowProduct(gi, t.vt.data(), H, SV, dp);
  std::copy(t.pd.begin(), t.pd.end(), t.pdb.begin() + r * SV);
  if (a.dropout) {
    const f8 ks = Splat(a.keep_scale);
    for (int64_t j = 0; j < SV; ++j) dp[j] = t.keep[j] ? dp[j] * ks : f8{};
  }
  f8 dot8{};
  for (int64_t j = 0; j < SV; ++j) dot8 += t.p[j] * dp[j];
  const f8 dot = Splat(Sum(dot8));
  f8* ds = t.dsb.data() + r * SV;
  for (int64_t j = 0; j < SV; ++j) ds[j] = t.p[j] * (dp[j] - dot);
  float* dsr = reinterpret_cast<float*>(ds);
  if (a.mask) {
    const bool* mr = a.mask + Offset(d, d.mask_b, d.mask_n, b, n, i);
    for (int64_t s = 0; s < S; ++s) dsr[s] = mr[s] ? dsr[s] : 0.0f;
  }
  for (int64_t s = S; s < SV * 8; ++s) dsr[s] = 0.0f;
  if (a.ds) std::copy(dsr, dsr + S, a.ds + ((b * d.N + n) * d.T + i) * S);
  WeightedSum<HV>(dsr, t.k.data(), SV, t.acc.data());
  float* dqo = a.dq + ((b * d.T + i) * d.N + n) * H;
  for (int64_t h = 0; h < H; ++h) dqo[h] = F(t.acc)[h] * a.scale;
}

template <int HV>
void Backward(const Args& a, int64_t item, Tile& t) {
  const Dims& d = a.d;
  const int64_t b = item / d.N, n = item % d.N, S = d.S, H = d.H;
  const int64_t SV = d.SV;
  Load(a, b, n, t);
  std::fill(t.dk.begin(), t.dk.end(), f8{});
  std::fill(t.dv.begin(), t.dv.end(), f8{});
  for (int64_t i0 = 0; i0 < d.T; i0 += kRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kRows, d.T - i0));
    for (int r = 0; r < rows; ++r) BackwardRow<HV>(a, b, n, i0 + r, r, t);
    const f8* q = t.q.data() + i0 * HV;
    for (int64_t s = 0; s < S; ++s) {
      f8* dks = t.dk.data() + s * HV;
      f8* dvs = t.dv.data() + s * HV;
      for (int r = 0; r < rows; ++r) {
        const f8 wp = Splat(F(t.pdb)[r * SV * 8 + s]);
        const f8 ws = Splat(F(t.dsb)[r * SV * 8 + s]);
        for (int h = 0; h < HV; ++h) {
          dvs[h] += wp * t.gb[r * HV + h];
          dks[h] += ws * q[r * HV + h];
        }
      }
    }
  }
  for (int64_t s = 0; s < S; ++s) {
    const int64_t off = ((b * d.S + s) * d.N + n) * H;
    std::copy(F(t.dk) + s * HV * 8, F(t.dk) + s * HV * 8 + H, a.dk + off);
    std::copy(F(t.dv) + s * HV * 8, F(t.dv) + s * HV * 8 + H, a.dv + off);
  }
}

// Runs fn(item, tile) for every (b, n) item on the caller's thread and the
// XLA thread pool's; returns when every item is done. Workers that start
// after the items ran out return at once, so the caller never waits on a
// task that was not scheduled to run.
template <typename Fn>
void ParallelItems(ffi::ThreadPool& pool, const Dims& d, Fn fn) {
  struct State {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::mutex mu;
    std::condition_variable cv;
  };
  const int64_t items = d.B * d.N;
  auto state = std::make_shared<State>();
  auto work = [state, items, d, fn]() {
    Tile tile(d);
    int64_t finished = 0;
    for (int64_t i; (i = state->next.fetch_add(1)) < items; ++finished)
      fn(i, tile);
    if (finished && state->done.fetch_add(finished) + finished == items) {
      std::lock_guard<std::mutex> lock(state->mu);
      state->cv.notify_all();
    }
  };
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), items) - 1;
  for (int64_t w = 0; w < helpers; ++w) pool.Schedule(decltype(work)(work));
  work();
  std::unique_lock<std::mutex> lock(state->mu);
  state->cv.wait(lock, [&] { return state->done.load() == items; });
}

// fn(std::integral_constant<int, HV>) for HV in 1..8.
template <typename Fn>
void Dispatch(int64_t hv, Fn fn) {
  switch (hv) {
    case 1: return fn(std::integral_constant<int, 1>());
    case 2: return fn(std::integral_constant<int, 2>());
    case 3: return fn(std::integral_constant<int, 3>());
    case 4: return fn(std::integral_constant<int, 4>());
    case 5: return fn(std::integral_constant<int, 5>());
    case 6: return fn(std::integral_constant<int, 6>());
    case 7: return fn(std::integral_constant<int, 7>());
    default: return fn(std::integral_constant<int, 8>());
  }
}

Dims GetDims(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer mask,
             ffi::AnyBuffer bias) {
  auto qd = q.dimensions(), kd = k.dimensions();
  Dims d{qd[0], qd[1], kd[1], qd[2], qd[3], 0, 0, 0, 0, 0, 0};
  d.SV = (d.S + 7) / 8, d.HV = (d.H + 7) / 8;
  auto md = mask.dimensions(), bd = bias.dimensions();
  d.mask_b = md[0] > 1, d.mask_n = md[1] > 1;
  d.bias_b = bd[0] > 1, d.bias_n = bd[1] > 1;
  return d;
}

Args MakeArgs(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
              ffi::AnyBuffer mask, ffi::AnyBuffer bias,
              ffi::AnyBuffer seeds, ffi::AnyBuffer row_base,
              ffi::AnyBuffer head_base, float scale, float rate,
              bool has_mask, bool has_bias) {
  Args a{};
  a.d = GetDims(q, k, mask, bias);
  a.q = static_cast<const float*>(q.untyped_data());
  a.k = static_cast<const float*>(k.untyped_data());
  a.v = static_cast<const float*>(v.untyped_data());
  a.mask = has_mask ? static_cast<const bool*>(mask.untyped_data()) : nullptr;
  a.bias = has_bias ? static_cast<const float*>(bias.untyped_data()) : nullptr;
  const uint32_t* sd = static_cast<const uint32_t*>(seeds.untyped_data());
  a.seed0 = sd[0], a.seed1 = sd[1];
  a.row_base = static_cast<const uint32_t*>(row_base.untyped_data());
  a.head_base = static_cast<const uint32_t*>(head_base.untyped_data());
  a.scale = scale;
  a.dropout = rate > 0.0f;
  const double t = std::round(static_cast<double>(rate) * 4294967296.0);
  a.threshold = static_cast<uint32_t>(std::min(t, 4294967295.0));
  a.keep_scale = static_cast<float>(1.0 / (1.0 - static_cast<double>(rate)));
  return a;
}

ffi::Error ForwardImpl(ffi::ThreadPool pool, ffi::AnyBuffer q,
                       ffi::AnyBuffer k, ffi::AnyBuffer v,
                       ffi::AnyBuffer mask, ffi::AnyBuffer bias,
                       ffi::AnyBuffer seeds, ffi::AnyBuffer row_base,
                       ffi::AnyBuffer head_base,
                       ffi::Result<ffi::AnyBuffer> out, float scale,
                       float rate, bool has_mask, bool has_bias) {
  Args a = MakeArgs(q, k, v, mask, bias, seeds, row_base, head_base, scale,
                    rate, has_mask, has_bias);
  a.out = static_cast<float*>(out->untyped_data());
  if (a.d.HV > 8) return ffi::Error::InvalidArgument("head dim above 64");
  Dispatch(a.d.HV, [&](auto hv) {
    ParallelItems(pool, a.d, [a](int64_t item, Tile& t) {
      Forward<decltype(hv)::value>(a, item, t);
    });
  });
  return ffi::Error::Success();
}

ffi::Error BackwardImpl(ffi::ThreadPool pool, ffi::AnyBuffer q,
                        ffi::AnyBuffer k, ffi::AnyBuffer v,
                        ffi::AnyBuffer mask, ffi::AnyBuffer bias,
                        ffi::AnyBuffer seeds, ffi::AnyBuffer row_base,
                        ffi::AnyBuffer head_base, ffi::AnyBuffer dout,
                        ffi::Result<ffi::AnyBuffer> dq,
                        ffi::Result<ffi::AnyBuffer> dk,
                        ffi::Result<ffi::AnyBuffer> dv,
                        ffi::Result<ffi::AnyBuffer> ds, float scale,
                        float rate, bool has_mask, bool has_bias) {
  Args a = MakeArgs(q, k, v, mask, bias, seeds, row_base, head_base, scale,
                    rate, has_mask, has_bias);
  a.dout = static_cast<const float*>(dout.untyped_data());
  a.dq = static_cast<float*>(dq->untyped_data());
  a.dk = static_cast<float*>(dk->untyped_data());
  a.dv = static_cast<float*>(dv->untyped_data());
  a.ds = has_bias ? static_cast<float*>(ds->untyped_data()) : nullptr;
  if (a.d.HV > 8) return ffi::Error::InvalidArgument("head dim above 64");
  Dispatch(a.d.HV, [&](auto hv) {
    ParallelItems(pool, a.d, [a](int64_t item, Tile& t) {
      Backward<decltype(hv)::value>(a, item, t);
    });
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZooAttentionForward, ForwardImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // q
                                  .Arg<ffi::AnyBuffer>()  // k
                                  .Arg<ffi::AnyBuffer>()  // v
                                  .Arg<ffi::AnyBuffer>()  // mask
                                  .Arg<ffi::AnyBuffer>()  // bias
                                  .Arg<ffi::AnyBuffer>()  // seeds
                                  .Arg<ffi::AnyBuffer>()  // row_base
                                  .Arg<ffi::AnyBuffer>()  // head_base
                                  .Ret<ffi::AnyBuffer>()  // out
                                  .Attr<float>("scale")
                                  .Attr<float>("rate")
                                  .Attr<bool>("has_mask")
                                  .Attr<bool>("has_bias"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZooAttentionBackward, BackwardImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // q
                                  .Arg<ffi::AnyBuffer>()  // k
                                  .Arg<ffi::AnyBuffer>()  // v
                                  .Arg<ffi::AnyBuffer>()  // mask
                                  .Arg<ffi::AnyBuffer>()  // bias
                                  .Arg<ffi::AnyBuffer>()  // seeds
                                  .Arg<ffi::AnyBuffer>()  // row_base
                                  .Arg<ffi::AnyBuffer>()  // head_base
                                  .Arg<ffi::AnyBuffer>()  // dout
                                  .Ret<ffi::AnyBuffer>()  // dq
                                  .Ret<ffi::AnyBuffer>()  // dk
                                  .Ret<ffi::AnyBuffer>()  // dv
                                  .Ret<ffi::AnyBuffer>()  // ds
                                  .Attr<float>("scale")
                                  .Attr<float>("rate")
                                  .Attr<bool>("has_mask")
                                  .Attr<bool>("has_bias"));
