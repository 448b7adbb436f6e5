// Causal attention over slot regions on the CPU, without materializing (L x S) scores or masks.
//
// Flash-attention's order on a CPU: for each (row, kv head, block of queries), keys are read a
// block at a time and folded into a running max, sum and output (online softmax), so memory
// traffic grows with S, not L x S, and exp runs as a vectorizable polynomial (MLX's CPU exp is
// scalar). Work items are split across the cores. The innermost loops are plain C++ that GCC
// vectorizes; the entry point is cloned per x86 level and picked at run time by the CPU's features.

#include "attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "pool.h"
#include "vectors.h"

namespace mlxchat {

namespace {

constexpr int QUERY_BLOCK = 16;  // queries of one head group that share each key block
constexpr int KEY_BLOCK = 64;    // keys whose scores are live at once (per query row)
constexpr int KEY_SEGMENT = 512;  // keys of one work item: a longer row is split across the cores

// C (M x N) += A (M x K) . B (K x N), row-major with leading dimensions: tiles of R rows x 8V outputs
// kept in registers (R x V vectors), so each loaded B vector serves R rows and the sums form R x V
// independent chains. Every output sums over k in order, whatever the tile: the same bits for any M.
template <int R, int V>
__attribute__((always_inline)) inline void tile(const float* A, int64_t lda, const float* B, int64_t ldb, float* out,
                                                int64_t ldc, int64_t K) {
  v8 acc[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) acc[r][v] = load8(out + r * ldc + 8 * v);
  }
  for (int64_t k = 0; k < K; ++k) {
    v8 b[V];
    for (int v = 0; v < V; ++v) b[v] = load8(B + k * ldb + 8 * v);
    for (int r = 0; r < R; ++r) {
      const float a = A[r * lda + k];
      for (int v = 0; v < V; ++v) acc[r][v] += a * b[v];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) store8(out + r * ldc + 8 * v, acc[r][v]);
  }
}

// Columns [n0, n0 + 8V) of C for every row: R rows at a time, then one by one.
template <int R, int V>
__attribute__((always_inline)) inline void column_tiles(const float* A, int64_t lda, const float* B, int64_t ldb,
                                                        float* out, int64_t ldc, int64_t M, int64_t K) {
  int64_t m0 = 0;
  for (; m0 + R <= M; m0 += R) tile<R, V>(A + m0 * lda, lda, B, ldb, out + m0 * ldc, ldc, K);
  for (; m0 < M; ++m0) tile<1, V>(A + m0 * lda, lda, B, ldb, out + m0 * ldc, ldc, K);
}

__attribute__((always_inline)) inline void gemm_acc(const float* A, int64_t lda, const float* B, int64_t ldb,
                                                    float* out, int64_t ldc, int64_t M, int64_t N, int64_t K) {
  int64_t n0 = 0;
  // A decode step's few rows (a head group's queries) need the wide tiles' independent sums; a prompt's
  // many rows are quicker in taller ones (fewer B loads per multiply-add).
  if (M <= 8) {
    for (; n0 + 32 <= N; n0 += 32) column_tiles<2, 4>(A, lda, B + n0, ldb, out + n0, ldc, M, K);
  } else {
    for (; n0 + 16 <= N; n0 += 16) column_tiles<4, 2>(A, lda, B + n0, ldb, out + n0, ldc, M, K);
  }
  for (; n0 + 8 <= N; n0 += 8) column_tiles<4, 1>(A, lda, B + n0, ldb, out + n0, ldc, M, K);
  for (; n0 < N; ++n0)
    for (int64_t m = 0; m < M; ++m) {
      float sum = out[m * ldc + n0];
      for (int64_t k = 0; k < K; ++k) sum += A[m * lda + k] * B[k * ldb + n0];
      out[m * ldc + n0] = sum;
    }
}

struct Problem {
  const float* q;
  const float* k;
  const float* v;
  const int32_t* rows;  // row b reads slot rows[b] of k and v
  const int32_t* lengths;
  float* out;
  int64_t B, H, Hkv, L, S, D, Dv, slots;
  int64_t qs[3], ks[3], vs[3];  // strides of the first three axes (the last is contiguous)
  float scale;
};

// One (row, kv head, block of queries) over the keys [k0, k1) of its visible range: its G heads x up to
// QUERY_BLOCK queries attend together. With `partial` null the block covers every visible key and
// writes its output; else it writes its running max, sum and unnormalized output there, for `merge`.
MLXCHAT_CLONES void attend_block(const Problem& p, int64_t b, int64_t kh, int64_t q0, int64_t k0, int64_t k1,
                                 float* partial, std::vector<float>& scratch) {
  const int64_t G = p.H / p.Hkv, D = p.D, Dv = p.Dv;
  const int64_t q1 = std::min(q0 + QUERY_BLOCK, p.L);
  const int64_t rows = G * (q1 - q0);
  // Bad indices (the Python side checks them) read nothing rather than out of bounds.
  const bool valid_row = p.rows[b] >= 0 && p.rows[b] < p.slots;
  const int64_t length = valid_row ? std::clamp<int64_t>(p.lengths[b], 0, p.S) : 0;
  const int64_t first = length - p.L;  // position of query 0
  scratch.resize(rows * (D + Dv + KEY_BLOCK + 2) + D * KEY_BLOCK);
  float* Kt = scratch.data();
  float* Q = Kt + D * KEY_BLOCK;
  float* acc = Q + rows * D;
  float* s = acc + rows * Dv;
  float* m = s + rows * KEY_BLOCK;
  float* l = m + rows;
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t i = q0; i < q1; ++i) {
      const int64_t r = g * (q1 - q0) + (i - q0);
      const float* src = p.q + b * p.qs[0] + (kh * G + g) * p.qs[1] + i * p.qs[2];
      for (int64_t d = 0; d < D; ++d) Q[r * D + d] = src[d] * p.scale;
      std::fill(acc + r * Dv, acc + (r + 1) * Dv, 0.0f);
      m[r] = -std::numeric_limits<float>::infinity();
      l[r] = 0.0f;
    }
  }
  const float* K = p.k + (valid_row ? p.rows[b] : 0) * p.ks[0] + kh * p.ks[1];
  const float* V = p.v + (valid_row ? p.rows[b] : 0) * p.vs[0] + kh * p.vs[1];
  const int64_t key_end = std::min(k1, std::max<int64_t>(0, first + q1));  // the last query sees keys < first + q1
  for (int64_t j0 = k0; j0 < key_end; j0 += KEY_BLOCK) {
    const int64_t j1 = std::min(j0 + KEY_BLOCK, key_end), nj = j1 - j0;
    // The block's keys transposed (D x KEY_BLOCK): a row's scores are then sums of whole vectors. Eight
    // keys by eight dimensions at a time in registers: a decode step's few rows cannot amortize a
    // transpose one float at a time (it cost as much as their scores).
    int64_t j = 0;
    for (; D % 8 == 0 && j + 8 <= nj; j += 8) {
      for (int64_t d = 0; d < D; d += 8) {
        v8 t[8];
        for (int i = 0; i < 8; ++i) t[i] = load8(K + (j0 + j + i) * p.ks[2] + d);
        transpose8(t);
        for (int i = 0; i < 8; ++i) store8(Kt + (d + i) * KEY_BLOCK + j, t[i]);
      }
    }
    for (; j < nj; ++j) {
      const float* kj = K + (j0 + j) * p.ks[2];
      for (int64_t d = 0; d < D; ++d) Kt[d * KEY_BLOCK + j] = kj[d];
    }
    // Scores of every row against the block's keys, as one small matrix product.
    std::fill(s, s + rows * KEY_BLOCK, 0.0f);
    gemm_acc(Q, D, Kt, KEY_BLOCK, s, KEY_BLOCK, rows, KEY_BLOCK, D);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t limit = first + q0 + (r % (q1 - q0)) + 1;  // keys < limit are visible to row r
      float* sr = s + r * KEY_BLOCK;
      float block_max = m[r];
      for (int64_t j = 0; j < nj; ++j) {
        if (j0 + j >= limit) sr[j] = -std::numeric_limits<float>::infinity();
        block_max = std::max(block_max, sr[j]);
      }
      if (block_max == -std::numeric_limits<float>::infinity()) {  // nothing visible to this row yet
        std::fill(sr, sr + nj, 0.0f);
        continue;
      }
      const float correction = exp_poly(m[r] - block_max);
      m[r] = block_max;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < nj; ++j) {
        sr[j] = exp_poly(sr[j] - block_max);
        sum += sr[j];
      }
      l[r] = l[r] * correction + sum;
      float* ar = acc + r * Dv;
#pragma omp simd
      for (int64_t d = 0; d < Dv; ++d) ar[d] *= correction;
    }
    // The block's values weighted by the rows' probabilities, added to their outputs.
    gemm_acc(s, KEY_BLOCK, V + j0 * p.vs[2], p.vs[2], acc, Dv, rows, Dv, nj);
  }
  if (partial != nullptr) {  // rows x (max, sum, Dv outputs)
    for (int64_t r = 0; r < rows; ++r) {
      partial[r * (Dv + 2)] = m[r];
      partial[r * (Dv + 2) + 1] = l[r];
      std::copy(acc + r * Dv, acc + (r + 1) * Dv, partial + r * (Dv + 2) + 2);
    }
    return;
  }
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t i = q0; i < q1; ++i) {
      const int64_t r = g * (q1 - q0) + (i - q0);
      float* dst = p.out + ((b * p.H + kh * G + g) * p.L + i) * Dv;
      const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
      for (int64_t d = 0; d < Dv; ++d) dst[d] = acc[r * Dv + d] * inv;
    }
  }
}

// A block's output from its segments' partials, folded in segment order (the same for any batch).
void merge(const Problem& p, int64_t b, int64_t kh, int64_t q0, int64_t segments, const float* partials) {
  const int64_t G = p.H / p.Hkv, Dv = p.Dv, q1 = std::min(q0 + QUERY_BLOCK, p.L), rows = G * (q1 - q0);
  for (int64_t r = 0; r < rows; ++r) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t sgm = 0; sgm < segments; ++sgm) m = std::max(m, partials[(sgm * rows + r) * (Dv + 2)]);
    const int64_t g = r / (q1 - q0), i = q0 + r % (q1 - q0);
    float* dst = p.out + ((b * p.H + kh * G + g) * p.L + i) * Dv;
    std::fill(dst, dst + Dv, 0.0f);
    float l = 0.0f;
    for (int64_t sgm = 0; sgm < segments; ++sgm) {
      const float* part = partials + (sgm * rows + r) * (Dv + 2);
      if (part[0] == -std::numeric_limits<float>::infinity()) continue;
      const float w = exp_poly(part[0] - m);
      l += part[1] * w;
      for (int64_t d = 0; d < Dv; ++d) dst[d] += part[2 + d] * w;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t d = 0; d < Dv; ++d) dst[d] *= inv;
  }
}

struct Item {
  int64_t b, kh, q0, k0, k1;
  float* partial;  // null: the block's only segment writes its output
};

void run(const Problem& p, int threads) {
  // Work items: (row, kv head, block of queries, segment of KEY_SEGMENT keys). A long row is cut
  // into segments so that the cores share it; where it is cut depends only on the row itself, so
  // a row's result is the same whatever else is in the pass.
  const int64_t blocks = (p.L + QUERY_BLOCK - 1) / QUERY_BLOCK, G = p.H / p.Hkv;
  std::vector<Item> items;
  struct Merge {
    int64_t b, kh, q0, segments;
    size_t offset;
  };
  std::vector<Merge> merges;
  size_t partial_floats = 0;
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t length = std::clamp<int64_t>(p.lengths[b], 0, p.S);
    for (int64_t kh = 0; kh < p.Hkv; ++kh) {
      for (int64_t qb = 0; qb < blocks; ++qb) {
        const int64_t q0 = qb * QUERY_BLOCK, q1 = std::min(q0 + QUERY_BLOCK, p.L);
        const int64_t key_end = std::max<int64_t>(0, length - p.L + q1);
        const int64_t segments = std::max<int64_t>(1, (key_end + KEY_SEGMENT - 1) / KEY_SEGMENT);
        if (segments > 1) {
          merges.push_back({b, kh, q0, segments, partial_floats});
          partial_floats += segments * G * (q1 - q0) * (p.Dv + 2);
        }
        for (int64_t sgm = 0; sgm < segments; ++sgm) {
          items.push_back({b, kh, q0, sgm * KEY_SEGMENT, segments > 1 ? (sgm + 1) * KEY_SEGMENT : key_end, nullptr});
        }
      }
    }
  }
  std::vector<float> partials(partial_floats);
  {
    size_t item = 0;
    for (const auto& mg : merges) {
      while (items[item].b != mg.b || items[item].kh != mg.kh || items[item].q0 != mg.q0) ++item;
      const int64_t rows = G * (std::min(mg.q0 + QUERY_BLOCK, p.L) - mg.q0);
      for (int64_t sgm = 0; sgm < mg.segments; ++sgm, ++item) {
        items[item].partial = partials.data() + mg.offset + sgm * rows * (p.Dv + 2);
      }
    }
  }
  parallel_for(static_cast<int64_t>(items.size()), threads, [&p, &items](int64_t it) {
    thread_local std::vector<float> scratch;
    const Item& w = items[it];
    attend_block(p, w.b, w.kh, w.q0, w.k0, w.k1, w.partial, scratch);
  });
  for (const auto& mg : merges) merge(p, mg.b, mg.kh, mg.q0, mg.segments, partials.data() + mg.offset);
}

}  // namespace

template <>
void SlotAttention::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const auto &q = inputs[0], &k = inputs[1], &v = inputs[2], &rows = inputs[3], &lengths = inputs[4];
  auto& encoder = begin(inputs, outputs);
  auto& out = outputs[0];
  Problem p{q.data<float>(), k.data<float>(), v.data<float>(), rows.data<int32_t>(), lengths.data<int32_t>(), out.data<float>(),
            q.shape(0), q.shape(1), k.shape(1), q.shape(2), k.shape(2), q.shape(3), v.shape(3), k.shape(0),
            {q.strides()[0], q.strides()[1], q.strides()[2]},
            {k.strides()[0], k.strides()[1], k.strides()[2]},
            {v.strides()[0], v.strides()[1], v.strides()[2]},
            params_.scale};
  encoder.dispatch([p, q, k, v, threads = params_.threads]() mutable {
    // An input whose last axis is not contiguous is gathered first: known only now, evaluated (a lazy
    // view's strides are not its own until then). Queries are usually a fresh output, K and V the slot
    // buffers or views of them, whose last axis is contiguous.
    auto gather = [](const mx::array& a, std::vector<float>& copy, const float*& data, int64_t* strides) {
      if (a.strides()[3] == 1) return;
      data = row_major(a, copy);
      strides[0] = a.shape(1) * a.shape(2) * a.shape(3), strides[1] = a.shape(2) * a.shape(3), strides[2] = a.shape(3);
    };
    std::vector<float> gathered[3];
    gather(q, gathered[0], p.q, p.qs);
    gather(k, gathered[1], p.k, p.ks);
    gather(v, gathered[2], p.v, p.vs);
    run(p, threads);
  });
}

mx::array slot_attention(const mx::array& q, const mx::array& k, const mx::array& v, const mx::array& rows,
                         const mx::array& lengths, float scale, int threads) {
  if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4 || rows.ndim() != 1 || lengths.ndim() != 1) {
    throw std::invalid_argument("slot_attention: q, k, v are (B, heads, length, dim); rows, lengths are (B,)");
  }
  if (q.dtype() != mx::float32 || k.dtype() != mx::float32 || v.dtype() != mx::float32) {
    throw std::invalid_argument("slot_attention: float32 only");
  }
  // (0 KV heads divided by zero, in this check and in the kernel: SIGFPE killed the process)
  if (q.shape(1) < 1 || k.shape(1) < 1 || q.shape(3) < 1 || v.shape(3) < 1) {
    throw std::invalid_argument("slot_attention: heads and head dims must be at least 1");
  }
  if (k.shape(0) != v.shape(0) || rows.shape(0) != q.shape(0) || lengths.shape(0) != q.shape(0) ||
      k.shape(1) != v.shape(1) || q.shape(1) % k.shape(1) != 0 || k.shape(2) != v.shape(2) ||
      q.shape(3) != k.shape(3)) {
    throw std::invalid_argument("slot_attention: shapes do not match");
  }
  auto stream = mx::default_stream(mx::Device::cpu);
  return mx::array({q.shape(0), q.shape(1), q.shape(2), v.shape(3)}, mx::float32,
                   std::make_shared<SlotAttention>(stream, AttentionParams{scale, threads}),
                   {q, k, v, mx::astype(rows, mx::int32, stream), mx::astype(lengths, mx::int32, stream)});
}

}  // namespace mlxchat
