// A transposed copy on CPU: x [*lead, *rest] -> [*rest, *lead], that is
// a [R, C] matrix to its [C, R] transpose with R = prod(lead) and
// C = prod(rest), in square tiles of kTile that stay in cache on both
// sides (float32 tiles through 8 x 8 AVX register transposes).
//
// XLA:CPU writes such a copy as one loop over the output that reads the
// input a column at a time; at the sizes the harness trains that pass
// costs several times the matmul it feeds (`zoo.models.dense`).

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "xla/ffi/api/ffi.h"
#include "cpu_attention_simd.h"
#include "cpu_parallel.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kTile = 32;

struct Matrix {
  const char* in;
  char* out;
  int64_t rows, cols;
};

// out[c, r] = in[r, c] over the tile [r0, r1) x [c0, c1), T-sized elements.
template <typename T>
void CopyTile(const Matrix& m, int64_t r0, int64_t r1, int64_t c0,
              int64_t c1) {
  const T* in = reinterpret_cast<const T*>(m.in);
  T* out = reinterpret_cast<T*>(m.out);
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t r = r0; r < r1; ++r) out[c * m.rows + r] = in[r * m.cols + c];
}

template <typename T>
void Tile(const Matrix& m, int64_t r0, int64_t c0) {
  const int64_t r1 = std::min(r0 + kTile, m.rows);
  const int64_t c1 = std::min(c0 + kTile, m.cols);
  if constexpr (sizeof(T) == 4) {  // moved as floats: the same bits
    Transpose(reinterpret_cast<const float*>(m.in) + r0 * m.cols + c0,
              r1 - r0, c1 - c0, m.cols,
              reinterpret_cast<float*>(m.out) + c0 * m.rows + r0, m.rows);
  } else {
    CopyTile<T>(m, r0, r1, c0, c1);
  }
}

template <typename T>
void Run(ffi::ThreadPool& pool, const Matrix& m) {
  constexpr int64_t kTilesPerItem = 16;  // a few µs of work per item
  const int64_t row_tiles = (m.rows + kTile - 1) / kTile;
  const int64_t tiles = row_tiles * ((m.cols + kTile - 1) / kTile);
  const int64_t items = (tiles + kTilesPerItem - 1) / kTilesPerItem;
  auto fn = [m, tiles, row_tiles](int64_t item, int) {
    const int64_t end = std::min(tiles, (item + 1) * kTilesPerItem);
    for (int64_t i = item * kTilesPerItem; i < end; ++i)
      Tile<T>(m, (i % row_tiles) * kTile, (i / row_tiles) * kTile);
  };
  zoo::ParallelFor(pool, items, [] { return 0; }, fn);
}

ffi::Error TransposeImpl(ffi::ThreadPool pool, ffi::AnyBuffer x,
                         ffi::Result<ffi::AnyBuffer> out, int64_t lead) {
  const auto dims = x.dimensions();
  if (lead < 0 || lead > static_cast<int64_t>(dims.size()))
    return ffi::Error::InvalidArgument("lead outside the operand's rank");
  Matrix m{static_cast<const char*>(x.untyped_data()),
           static_cast<char*>(out->untyped_data()), 1, 1};
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i)
    (i < lead ? m.rows : m.cols) *= dims[i];
  switch (ffi::ByteWidth(x.element_type())) {
    case 1: Run<uint8_t>(pool, m); break;
    case 2: Run<uint16_t>(pool, m); break;
    case 4: Run<uint32_t>(pool, m); break;
    case 8: Run<uint64_t>(pool, m); break;
    default: return ffi::Error::InvalidArgument("element size not 1, 2, 4 or 8");
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZooTranspose, TransposeImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Ret<ffi::AnyBuffer>()  // transposed
                                  .Attr<int64_t>("lead"));
