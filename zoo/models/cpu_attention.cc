// Dense attention on CPU, forward and backward, one (batch row, head) at a
// time, every [T, S] row of probabilities kept in cache: the logits, mask,
// softmax, dropout and both products of a query row are computed together,
// where XLA:CPU runs each as its own pass over a [B, N, T, S] array.
// Query rows go through the products kRows at a time, so each vector of k
// or v loaded serves them all, and the backward pass sums dk and dv over
// blocks of kBlock rows held in registers.
//
// The numbers are those of `zoo.models.layers._dense_attention` up to float
// rounding: logits (q * scale) . k + bias, masked logits set to -1e9 (a query
// with no key gets a uniform row), softmax, inverted dropout whose keep bit
// is `zoo.models.dropout`'s counter hash of the probability's flat index,
// then the product with v. The backward pass recomputes each row. A row
// whose mask ends early (causal, padded keys) is computed up to its last
// key only: the masked tail's probabilities are exactly 0.
//
// Shapes: q [B, T, N, H], k and v [B, S, N, H], mask bool [B|1, N|1, T, S],
// bias float32 [B|1, N|1, T, S], seeds uint32 [2], row_base uint32 [B] and
// head_base uint32 [N] (the flat index of element (b, n, 0, 0) is
// row_base[b] + head_base[n], which lets a shard of the batch or of the
// heads draw the global mask). With a bias, the backward pass also returns
// the logits' gradient ds [B, N, T, S], which the caller sums over the
// bias's broadcast dims in a fixed order (the same sums on every run).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "xla/ffi/api/ffi.h"
#include "cpu_attention_simd.h"
#include "cpu_parallel.h"

namespace ffi = xla::ffi;

namespace {

constexpr float kMaskValue = -1e9f;
constexpr int kRows = 4;  // query rows whose products go together
constexpr int kBlock = 32;  // query rows whose dk, dv updates go together
constexpr float kPadValue = -3e38f;  // a padding key: exp gives exactly 0

struct Dims {
  int64_t B, T, S, N, H;
  int64_t mask_b, mask_n, bias_b, bias_n;  // 0 = broadcast, else the dim
  int64_t SV, HV;  // S and H in vectors (kLanes each), rounded up
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

// The (b, n) tile's operands, copied out of their strided layouts and
// padded with zeros to whole vectors and to whole groups of kRows query
// rows: q scaled and the output's gradient g [TP, HV], k and v [S, HV],
// their transposes [H, SV]; then a block of kBlock query rows [kBlock, SV]:
// logits (or dp), probabilities before (p) and after (pd) dropout, the keep
// bits, ds; a group's products [kRows, HV], and the dk, dv sums transposed
// [H, SV].
struct Tile {
  std::vector<fv> q, g, k, v, kt, vt, lb, pb, pdb, dsb, acc, dkt, dvt;
  std::vector<iv> keepb;
  int64_t len = 0;  // vectors of the group's rows that can be nonzero
  explicit Tile(const Dims& d)
      : q(Padded(d.T) * d.HV), g(Padded(d.T) * d.HV),
        k(d.SV * kLanes * d.HV), v(d.SV * kLanes * d.HV),
        kt(d.H * d.SV), vt(d.H * d.SV), lb(kBlock * d.SV),
        pb(kBlock * d.SV), pdb(kBlock * d.SV), dsb(kBlock * d.SV),
        acc(kRows * d.HV), dkt(d.H * d.SV), dvt(d.H * d.SV),
        keepb(kBlock * d.SV) {}
  static int64_t Padded(int64_t T) { return (T + kRows - 1) / kRows * kRows; }
};

inline float* F(std::vector<fv>& x) {
  return reinterpret_cast<float*>(x.data());
}

// x's rows [rows, H] at stride `stride`, times `scale`, into t's [rows, HP]
// (a vector at a time where H is whole vectors).
inline void Rows(const float* x, int64_t rows, int64_t H, int64_t stride,
                 int64_t HP, float scale, float* t) {
  if (H % kLanes == 0) {
    const fv by = Splat(scale);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t h = 0; h < H; h += kLanes) {
        fv xv;
        std::memcpy(&xv, x + i * stride + h, sizeof(fv));
        *reinterpret_cast<fv*>(t + i * HP + h) = xv * by;
      }
    return;
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t h = 0; h < H; ++h) t[i * HP + h] = x[i * stride + h] * scale;
}

void Load(const Args& a, int64_t b, int64_t n, Tile& t, bool backward) {
  const Dims& d = a.d;
  const int64_t HP = d.HV * kLanes, SP = d.SV * kLanes, stride = d.N * d.H;
  const float* qb = a.q + (b * d.T * d.N + n) * d.H;
  const float* kb = a.k + (b * d.S * d.N + n) * d.H;
  const float* vb = a.v + (b * d.S * d.N + n) * d.H;
  Rows(qb, d.T, d.H, stride, HP, a.scale, F(t.q));
  Rows(vb, d.S, d.H, stride, HP, 1.0f, F(t.v));
  Transpose(kb, d.S, d.H, stride, F(t.kt), SP);  // k^T [H, SP]
  if (!backward) return;
  Rows(a.dout + (b * d.T * d.N + n) * d.H, d.T, d.H, stride, HP, 1.0f,
       F(t.g));
  Rows(kb, d.S, d.H, stride, HP, 1.0f, F(t.k));
  Transpose(vb, d.S, d.H, stride, F(t.vt), SP);  // v^T [H, SP]
}

inline int64_t Offset(const Dims& d, bool per_b, bool per_n, int64_t b,
                      int64_t n, int64_t i) {
  return (((per_b ? b : 0) * (per_n ? d.N : 1) + (per_n ? n : 0)) * d.T +
          i) * d.S;
}

// Block slot r (query row i): its logits in lb made probabilities before
// (pb) and after (pd) dropout, with the keep bits (dropout only), over the
// block's first t.len vectors.
void Softmax(const Args& a, int64_t b, int64_t n, int64_t i, int r, Tile& t) {
  const Dims& d = a.d;
  const int64_t SV = d.SV, S = d.S, len = t.len, width = len * kLanes;
  fv *row = t.lb.data() + r * SV, *p = t.pb.data() + r * SV,
     *pd = t.pdb.data() + r * SV;
  iv* keep = t.keepb.data() + r * SV;
  float* x = reinterpret_cast<float*>(row);
  if (a.bias) {
    const float* br = a.bias + Offset(d, d.bias_b, d.bias_n, b, n, i);
    for (int64_t s = 0; s < std::min(S, width); ++s) x[s] += br[s];
  }
  if (a.mask) {
    Masked(a.mask + Offset(d, d.mask_b, d.mask_n, b, n, i),
           std::min(S, width), kMaskValue, row);
  }
  for (int64_t s = S; s < width; ++s) x[s] = kPadValue;
  fv mx = row[0];
  for (int64_t j = 1; j < len; ++j) mx = mx > row[j] ? mx : row[j];
  const fv m8 = Splat(Max(mx));
  fv sum{};
  for (int64_t j = 0; j < len; ++j) {
    p[j] = Exp(row[j] - m8);
    sum += p[j];
  }
  const fv inverse = Splat(1.0f / Sum(sum));
  std::fill(pd + len, pd + SV, fv{});
  if (!a.dropout) {
    for (int64_t j = 0; j < len; ++j) pd[j] = p[j] *= inverse;
    return;
  }
  const uint32_t base = a.row_base[b] + a.head_base[n] +
                        static_cast<uint32_t>(i * S);
  uv lane;
  for (int k = 0; k < kLanes; ++k) lane[k] = k;
  const fv ks = Splat(a.keep_scale);
  for (int64_t j = 0; j < len; ++j) {
    const uv idx = base + static_cast<uint32_t>(j * kLanes) + lane;
    const uv bits = Mix32(Mix32(idx ^ a.seed0) + a.seed1);
    keep[j] = bits >= a.threshold;
    p[j] *= inverse;
    pd[j] = keep[j] ? p[j] * ks : fv{};
  }
}

// The probabilities of query rows i0.. i0 + rows - 1 in block slots r0..
// (the group's slots past `rows` hold zeros), computed up to the last key
// any of them reaches (t.len vectors): a row's keys past its own reach are
// masked, and their probabilities exactly 0.
void Group(const Args& a, int64_t b, int64_t n, int64_t i0, int rows, int r0,
           Tile& t) {
  const Dims& d = a.d;
  const int64_t SV = d.SV;
  t.len = a.mask ? 0 : SV;
  for (int r = 0; a.mask && r < rows; ++r) {
    const bool* mr = a.mask + Offset(d, d.mask_b, d.mask_n, b, n, i0 + r);
    t.len = std::max(t.len, Reach(mr, d.S, SV));
  }
  RowsProduct<kRows>(F(t.q) + i0 * d.HV * kLanes, d.HV * kLanes,
                     t.kt.data(), d.H, SV, t.len, t.lb.data() + r0 * SV);
  for (int r = 0; r < rows; ++r) Softmax(a, b, n, i0 + r, r0 + r, t);
  for (int r = r0 + rows; r < r0 + kRows; ++r) {
    std::fill_n(t.pb.begin() + r * SV, SV, fv{});
    std::fill_n(t.pdb.begin() + r * SV, SV, fv{});
  }
}

template <int HV>
void Forward(const Args& a, int64_t item, Tile& t) {
  const Dims& d = a.d;
  const int64_t b = item / d.N, n = item % d.N;
  Load(a, b, n, t, false);
  for (int64_t i0 = 0; i0 < d.T; i0 += kRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kRows, d.T - i0));
    Group(a, b, n, i0, rows, 0, t);
    RowsWeightedSum<HV, kRows>(F(t.pdb), d.SV * kLanes, t.v.data(), t.len,
                               t.acc.data());
    for (int r = 0; r < rows; ++r)
      std::copy_n(F(t.acc) + r * HV * kLanes, d.H,
                  a.out + ((b * d.T + i0 + r) * d.N + n) * d.H);
  }
}

// Block slot r's (query row i's) ds from its dp (in lb), written out as the
// bias gradient's row when there is a bias.
void Ds(const Args& a, int64_t b, int64_t n, int64_t i, int r, Tile& t) {
  const Dims& d = a.d;
  const int64_t S = d.S, SV = d.SV, len = t.len, width = len * kLanes;
  fv *dp = t.lb.data() + r * SV, *p = t.pb.data() + r * SV;
  const iv* keep = t.keepb.data() + r * SV;
  if (a.dropout) {
    const fv ks = Splat(a.keep_scale);
    for (int64_t j = 0; j < len; ++j) dp[j] = keep[j] ? dp[j] * ks : fv{};
  }
  fv dot8{};
  for (int64_t j = 0; j < len; ++j) dot8 += p[j] * dp[j];
  const fv dot = Splat(Sum(dot8));
  fv* ds = t.dsb.data() + r * SV;
  for (int64_t j = 0; j < len; ++j) ds[j] = p[j] * (dp[j] - dot);
  std::fill(ds + len, ds + SV, fv{});
  float* dsr = reinterpret_cast<float*>(ds);
  if (a.mask) {
    Masked(a.mask + Offset(d, d.mask_b, d.mask_n, b, n, i),
           std::min(S, width), 0.0f, ds);
  }
  for (int64_t s = S; s < width; ++s) dsr[s] = 0.0f;
  if (!a.ds) return;  // ds [B, N, T, S], whatever the bias broadcasts
  const int64_t at = Offset(d, true, true, b, n, i);
  std::copy_n(dsr, std::min(S, width), a.ds + at);
  std::fill(a.ds + at + std::min(S, width), a.ds + at + S, 0.0f);
}

// Query rows i0.. i0 + rows - 1 (block slots r0..): their probabilities,
// ds and dq; returns the vectors of keys any of them reaches.
template <int HV>
int64_t BackwardGroup(const Args& a, int64_t b, int64_t n, int64_t i0,
                      int rows, int r0, Tile& t) {
  const Dims& d = a.d;
  const int64_t H = d.H, SV = d.SV;
  Group(a, b, n, i0, rows, r0, t);
  RowsProduct<kRows>(F(t.g) + i0 * HV * kLanes, HV * kLanes, t.vt.data(), H,
                     SV, t.len, t.lb.data() + r0 * SV);  // dp
  for (int r = 0; r < rows; ++r) Ds(a, b, n, i0 + r, r0 + r, t);
  for (int r = r0 + rows; r < r0 + kRows; ++r)
    std::fill_n(t.dsb.begin() + r * SV, SV, fv{});
  RowsWeightedSum<HV, kRows>(F(t.dsb) + r0 * SV * kLanes, SV * kLanes,
                             t.k.data(), t.len, t.acc.data());
  for (int r = 0; r < rows; ++r) {
    const float* acc = F(t.acc) + r * HV * kLanes;
    float* dq = a.dq + ((b * d.T + i0 + r) * d.N + n) * H;
    for (int64_t h = 0; h < H; ++h) dq[h] = acc[h] * a.scale;
  }
  return t.len;
}

template <int HV>
void Backward(const Args& a, int64_t item, Tile& t) {
  const Dims& d = a.d;
  const int64_t b = item / d.N, n = item % d.N, H = d.H, SV = d.SV;
  const int64_t HP = HV * kLanes;
  Load(a, b, n, t, true);
  std::fill(t.dkt.begin(), t.dkt.end(), fv{});
  std::fill(t.dvt.begin(), t.dvt.end(), fv{});
  for (int64_t q0 = 0; q0 < d.T; q0 += kBlock) {
    const int64_t block = std::min<int64_t>(kBlock, Tile::Padded(d.T - q0));
    int64_t len = 0;  // vectors of keys any row of the block reaches
    for (int r0 = 0; r0 < block; r0 += kRows) {
      const int rows = static_cast<int>(
          std::min<int64_t>(kRows, d.T - q0 - r0));
      len = std::max(len, BackwardGroup<HV>(a, b, n, q0 + r0, rows, r0, t));
    }
    // dk += ds^T q and dv += pd^T g over the block's rows.
    OuterProduct(F(t.q) + q0 * HP, HP, t.dsb.data(), H, SV, block, len,
                 t.dkt.data());
    OuterProduct(F(t.g) + q0 * HP, HP, t.pdb.data(), H, SV, block, len,
                 t.dvt.data());
  }
  const int64_t at = (b * d.S * d.N + n) * H, stride = d.N * H;
  Transpose(F(t.dkt), H, d.S, SV * kLanes, a.dk + at, stride);
  Transpose(F(t.dvt), H, d.S, SV * kLanes, a.dv + at, stride);
}

// Runs fn(item, tile) for every (b, n) item on the pool (`zoo::ParallelFor`,
// one Tile per thread). Items write disjoint parts of the outputs.
template <typename Fn>
void ParallelItems(ffi::ThreadPool& pool, const Dims& d, Fn fn) {
  zoo::ParallelFor(pool, d.B * d.N, [d] { return Tile(d); }, fn);
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
  d.SV = (d.S + kLanes - 1) / kLanes, d.HV = (d.H + kLanes - 1) / kLanes;
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
  if (a.d.H > 64) return ffi::Error::InvalidArgument("head dim above 64");
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
  if (a.d.H > 64) return ffi::Error::InvalidArgument("head dim above 64");
  Dispatch(a.d.HV, [&](auto hv) {
    ParallelItems(pool, a.d, [a](int64_t item, Tile& t) {
      Backward<decltype(hv)::value>(a, item, t);
    });
  });
  return ffi::Error::Success();
}

// The inputs both handlers start with.
auto Inputs() {
  using B = ffi::AnyBuffer;
  return ffi::Ffi::Bind()
      .Ctx<ffi::ThreadPool>()
      .Arg<B>().Arg<B>().Arg<B>()   // q, k, v
      .Arg<B>().Arg<B>()            // mask, bias
      .Arg<B>().Arg<B>().Arg<B>();  // seeds, row_base, head_base
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZooAttentionForward, ForwardImpl,
                              Inputs()
                                  .Ret<ffi::AnyBuffer>()  // out
                                  .Attr<float>("scale")
                                  .Attr<float>("rate")
                                  .Attr<bool>("has_mask")
                                  .Attr<bool>("has_bias"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZooAttentionBackward, BackwardImpl,
                              Inputs()
                                  .Arg<ffi::AnyBuffer>()  // dout
                                  .Ret<ffi::AnyBuffer>()  // dq
                                  .Ret<ffi::AnyBuffer>()  // dk
                                  .Ret<ffi::AnyBuffer>()  // dv
                                  .Ret<ffi::AnyBuffer>()  // ds [B, N, T, S]
                                  .Attr<float>("scale")
                                  .Attr<float>("rate")
                                  .Attr<bool>("has_mask")
                                  .Attr<bool>("has_bias"));
