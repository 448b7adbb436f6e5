// The matmul's outer-product tiles, for calls of more rows than fused_columns takes (matmul_tasks.h).
#include <algorithm>
#include <cstring>

#include "matmul_tasks.h"

namespace mlxchat::matmul {

namespace {

// Y[r, c] = X[r] . W[c] for the R rows of a panel (pack_lanes) and a tile of TILE_COLUMNS columns
// (widen_lanes), by outer products: each loaded weight vector serves R rows, each row's weight 8 columns.
// Lane l of each (row, column) sums the products of k = l, l + 8, ... in order, as fused_columns' lane l
// does, and the lanes are added as sum8 adds them: the same bits, whatever the number of rows.
template <int R>
__attribute__((always_inline)) inline void outer_tile(const float* A, const float* B, int64_t vectors, float* Y,
                                                      int64_t ldy, int64_t width) {
  constexpr int H = TILE_COLUMNS / 8;
  v8 lanes[8][R][H];
  for (int l = 0; l < 8; ++l) {
    v8 acc[R][H] = {};
    const float* a = A + l * vectors * R;
    const float* b = B + l * vectors * TILE_COLUMNS;
    for (int64_t i = 0; i < vectors; ++i, a += R, b += TILE_COLUMNS) {
      v8 w[H];
      for (int h = 0; h < H; ++h) w[h] = load8(b + h * 8);
      // A scalar times a vector: GCC broadcasts it from memory (a vector built from scalars it does not).
      for (int r = 0; r < R; ++r) {
        for (int h = 0; h < H; ++h) acc[r][h] += a[r] * w[h];
      }
    }
    std::memcpy(lanes[l], acc, sizeof acc);
  }
  for (int r = 0; r < R; ++r) {
    float row[TILE_COLUMNS];
    for (int h = 0; h < H; ++h) {
      const auto lane = [&](int l) { return lanes[l][r][h]; };
      store8(row + h * 8, ((lane(0) + lane(4)) + (lane(2) + lane(6))) + ((lane(1) + lane(5)) + (lane(3) + lane(7))));
    }
    std::copy_n(row, width, Y + r * ldy);
  }
}

// Y (M x width, leading dimension ldy) from pack_lanes' panels and widen_lanes' tiles: each panel of rows
// takes every tile while it stays in the nearest cache.
template <int R>
__attribute__((always_inline)) inline void outer_panel(const float* A, int64_t K, const float* W, int64_t width,
                                                       float* Y, int64_t ldy) {
  for (int64_t t = 0; t < width; t += TILE_COLUMNS) {
    outer_tile<R>(A, W + t * K, K / 8, Y + t, ldy, std::min<int64_t>(TILE_COLUMNS, width - t));
  }
}

}  // namespace

void outer_products(const float* X, int64_t M, int64_t K, const float* W, int64_t width, float* Y,
                                   int64_t ldy) {
  int64_t m = 0;
  for (; m + ROW_TILE <= M; m += ROW_TILE) outer_panel<ROW_TILE>(X + m * K, K, W, width, Y + m * ldy, ldy);
  X += m * K, Y += m * ldy;
  switch (M - m) {
    case 5: return outer_panel<5>(X, K, W, width, Y, ldy);
    case 4: return outer_panel<4>(X, K, W, width, Y, ldy);
    case 3: return outer_panel<3>(X, K, W, width, Y, ldy);
    case 2: return outer_panel<2>(X, K, W, width, Y, ldy);
    case 1: return outer_panel<1>(X, K, W, width, Y, ldy);
    default: return;
  }
}

}  // namespace mlxchat::matmul
