// Causal attention over slot regions on the CPU, without materializing (L x S) scores or masks.
//
// Flash-attention's order on a CPU: for each (row, kv head, block of queries), keys are read a
// block at a time and folded into a running max, sum and output (online softmax), so memory
// traffic grows with S, not L x S, and exp runs as a vectorizable polynomial (MLX's CPU exp is
// scalar). Work items are split across the cores. The innermost loops are plain C++ that GCC
// vectorizes, for the x86 level the module is built for.

#include "attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "attention_loops.h"
#include "pool.h"

namespace mlxchat {

namespace {

// attend_typed for the type K and V are stored in, each type's loops inlined in it.
void attend_block(const Problem& p, int64_t b, int64_t kh, int64_t q0, int64_t k0, int64_t k1,
                                 float* partial, std::vector<float>& scratch) {
  switch (p.k.kind) {
    case Kind::f32: return attend_typed<Kind::f32>(p, b, kh, q0, k0, k1, partial, scratch);
    case Kind::f16: return attend_typed<Kind::f16>(p, b, kh, q0, k0, k1, partial, scratch);
    case Kind::bf16: return attend_typed<Kind::bf16>(p, b, kh, q0, k0, k1, partial, scratch);
    case Kind::q8: return attend_typed<Kind::q8>(p, b, kh, q0, k0, k1, partial, scratch);
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

// An array's bytes in row-major order: its own where the last axis is contiguous, else gathered into `copy`
// (a lazy view's strides are known only once evaluated). Strides in bytes of its first three axes.
const uint8_t* last_axis_contiguous(const mx::array& a, std::vector<uint8_t>& copy, int64_t* strides) {
  const int64_t size = a.itemsize();
  if (a.strides()[3] == 1) {
    for (int i = 0; i < 3; ++i) strides[i] = a.strides()[i] * size;
    return a.data<uint8_t>();
  }
  copy.resize(a.nbytes());
  for (size_t i = 0; i < a.size(); ++i) {
    std::memcpy(copy.data() + i * size, a.data<uint8_t>() + mx::elem_to_loc(static_cast<int>(i), a) * size, size);
  }
  strides[2] = a.shape(3) * size, strides[1] = a.shape(2) * strides[2], strides[0] = a.shape(1) * strides[1];
  return copy.data();
}

Kind kind_of(mx::Dtype t) {
  return t == mx::float16 ? Kind::f16 : t == mx::bfloat16 ? Kind::bf16 : t == mx::uint32 ? Kind::q8 : Kind::f32;
}

// K and V's arrays (parts each, from kv) as the loops read them: strides, and copies where the last axis is not contiguous.
void read_stored(Problem& p, const mx::array* kv, size_t parts, std::vector<uint8_t> (&copies)[6]) {
  for (int which = 0; which < 2; ++which) {
    Stored& st = which == 0 ? p.k : p.v;
    const mx::array* at = kv + which * parts;
    st.data = last_axis_contiguous(at[0], copies[3 * which], st.s);
    if (parts == 3) {
      int64_t bytes[3];
      st.scales = reinterpret_cast<const float*>(last_axis_contiguous(at[1], copies[3 * which + 1], bytes));
      for (int i = 0; i < 3; ++i) st.gs[i] = bytes[i] / 4;
      st.biases = reinterpret_cast<const float*>(last_axis_contiguous(at[2], copies[3 * which + 2], bytes));
      st.group = at[0].shape(3) * 4 / at[1].shape(3);
    }
  }
}

}  // namespace

void attend_heads(const float* q, const mx::array& k, const mx::array& v, const int32_t* rows, const int32_t* lengths,
                  float* out, int64_t B, int64_t H, float scale, int threads) {
  Problem p{q, {kind_of(k.dtype())}, {kind_of(v.dtype())}, rows, lengths, out, B, H, k.shape(1), 1, k.shape(2),
            k.shape(3), v.shape(3), k.shape(0), {H * k.shape(3), k.shape(3), k.shape(3)}, scale};
  std::vector<uint8_t> copies[6];
  const mx::array kv[2] = {k, v};
  read_stored(p, kv, 1, copies);
  run(p, threads);
}

template <>
void SlotAttention::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  // q, rows, lengths, then K's parts and V's: one array each for a float type, (values, scales, biases) for q8.
  auto& encoder = begin(inputs, outputs);
  auto& out = outputs[0];
  const auto &q = inputs[0], &k = inputs[3];
  const size_t parts = (inputs.size() - 3) / 2;
  Problem p{q.data<float>(), {kind_of(k.dtype())}, {kind_of(k.dtype())}, inputs[1].data<int32_t>(),
            inputs[2].data<int32_t>(), out.data<float>(), q.shape(0), q.shape(1), k.shape(1), q.shape(2), k.shape(2),
            q.shape(3), out.shape(3), k.shape(0), {q.strides()[0], q.strides()[1], q.strides()[2]}, params_.scale};
  dispatch(encoder, "attention", [p, inputs, parts, threads = params_.threads]() mutable {
    std::vector<float> q_copy;
    if (inputs[0].strides()[3] != 1) {
      const auto& q = inputs[0];
      p.q = row_major(q, q_copy);
      p.qs[0] = q.shape(1) * q.shape(2) * q.shape(3), p.qs[1] = q.shape(2) * q.shape(3), p.qs[2] = q.shape(3);
    }
    std::vector<uint8_t> copies[6];
    read_stored(p, inputs.data() + 3, parts, copies);
    run(p, threads);
  });
}

mx::array slot_attention(const mx::array& q, const std::vector<mx::array>& k, const std::vector<mx::array>& v,
                         const mx::array& rows, const mx::array& lengths, float scale, int threads) {
  if (k.empty() || k.size() != v.size() || (k.size() != 1 && k.size() != 3)) {
    throw std::invalid_argument("slot_attention: k and v are one array each, or (values, scales, biases) each");
  }
  for (const auto& a : {q, k[0], v[0]}) {
    if (a.ndim() != 4) throw std::invalid_argument("slot_attention: q, k, v are (B, heads, length, dim)");
  }
  if (rows.ndim() != 1 || lengths.ndim() != 1) throw std::invalid_argument("slot_attention: rows, lengths are (B,)");
  if (q.dtype() != mx::float32) throw std::invalid_argument("slot_attention: q is float32");
  const bool q8 = k.size() == 3;
  const auto stored = k[0].dtype();
  // K and V's dims: the q8 values are packed four to a uint32.
  const int dim = k[0].shape(3) * (q8 ? 4 : 1), dim_v = v[0].shape(3) * (q8 ? 4 : 1);
  if (q8) {
    for (const auto* parts : {&k, &v}) {
      const auto &w = (*parts)[0], &scales = (*parts)[1], &biases = (*parts)[2];
      if (w.dtype() != mx::uint32 || scales.dtype() != mx::float32 || biases.dtype() != mx::float32 ||
          scales.ndim() != 4 || scales.shape() != biases.shape() || scales.shape(3) < 1 ||
          (w.shape(3) * 4) % scales.shape(3) != 0 || (w.shape(3) * 4 / scales.shape(3)) < 8 ||
          !std::has_single_bit(static_cast<uint64_t>(w.shape(3) * 4 / scales.shape(3))) ||
          !std::equal(w.shape().begin(), w.shape().end() - 1, scales.shape().begin())) {
        throw std::invalid_argument(
            "slot_attention: 8-bit K/V are uint32 values with float32 scales and biases per group of 2**n >= 8 dims");
      }
    }
  } else if (stored != v[0].dtype() || (stored != mx::float32 && stored != mx::float16 && stored != mx::bfloat16)) {
    throw std::invalid_argument("slot_attention: k and v are float32, float16 or bfloat16, both alike");
  }
  const auto& k0 = k[0];
  const auto& v0 = v[0];
  // (0 KV heads divided by zero, in this check and in the kernel: SIGFPE killed the process)
  if (q.shape(1) < 1 || k0.shape(1) < 1 || q.shape(3) < 1 || dim_v < 1) {
    throw std::invalid_argument("slot_attention: heads and head dims must be at least 1");
  }
  if (k0.shape(0) != v0.shape(0) || rows.shape(0) != q.shape(0) || lengths.shape(0) != q.shape(0) ||
      k0.shape(1) != v0.shape(1) || q.shape(1) % k0.shape(1) != 0 || k0.shape(2) != v0.shape(2) || q.shape(3) != dim) {
    throw std::invalid_argument("slot_attention: shapes do not match");
  }
  auto stream = mx::default_stream(mx::Device::cpu);
  std::vector<mx::array> inputs = {q, mx::astype(rows, mx::int32, stream), mx::astype(lengths, mx::int32, stream)};
  inputs.insert(inputs.end(), k.begin(), k.end());
  inputs.insert(inputs.end(), v.begin(), v.end());
  return mx::array({q.shape(0), q.shape(1), q.shape(2), dim_v}, mx::float32,
                   std::make_shared<SlotAttention>(stream, AttentionParams{scale, threads}), std::move(inputs));
}

}  // namespace mlxchat
