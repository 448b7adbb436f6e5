// A decode pass's new K/V rows into the slot buffers (kv_write.h): the buffer's memory is taken over where MLX
// holds no other reference to it, as MLX's own scatter does, so a step writes B x heads rows, not the buffer.

#include "kv_write.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "vectors.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace mlxchat {

namespace {

// The float16 MLX makes of a NaN: its sign and one quiet NaN (F16C would keep the payload's top bits).
uint16_t half_nan(float x) { return static_cast<uint16_t>((std::bit_cast<uint32_t>(x) >> 16 & 0x8000u) | 0x7D00u); }

#if defined(__F16C__)
// Rows of float32 to float16, eight values an instruction, as MLX's astype rounds them (built for a level with F16C).
void halves_f16c(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(dst + i, &h, sizeof h);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) {
      for (int64_t j = i; j < i + 8; ++j) dst[j] = std::isnan(src[j]) ? half_nan(src[j]) : dst[j];
    }
  }
  for (; i < n; ++i) dst[i] = std::isnan(src[i]) ? half_nan(src[i]) : _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}
#endif

// As MLX's bfloat16 from a float: its NaN for any NaN, else rounded to nearest, ties to even.
uint16_t to_bfloat16(float x) {
  if (std::isnan(x)) return 0x7FC0;
  uint32_t u = std::bit_cast<uint32_t>(x);
  u += (u >> 16 & 1) + 0x7FFFu;
  return static_cast<uint16_t>(u >> 16);
}

void write_row(mx::Dtype stored, const float* src, uint8_t* dst, int64_t n) {
  if (stored == mx::float32) {
    std::memcpy(dst, src, 4 * n);
  } else if (stored == mx::bfloat16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = to_bfloat16(src[i]);
      std::memcpy(dst + 2 * i, &h, 2);
    }
  } else {
#if defined(__F16C__)
    return halves_f16c(src, reinterpret_cast<uint16_t*>(dst), n);
#endif
    for (int64_t i = 0; i < n; ++i) {  // (the compiler's conversion: rounded to nearest even, as MLX's astype)
      const _Float16 h = static_cast<_Float16>(src[i]);
      uint16_t bits;
      std::memcpy(&bits, &h, 2);
      bits = std::isnan(src[i]) ? half_nan(src[i]) : bits;
      std::memcpy(dst + 2 * i, &bits, 2);
    }
  }
}

// `buffer`'s elements in row-major order into `out` (which holds nothing yet).
void copy_row_major(const mx::array& buffer, mx::array& out) {
  const size_t size = buffer.itemsize();
  if (buffer.flags().row_contiguous) {
    std::memcpy(out.data<uint8_t>(), buffer.data<uint8_t>(), buffer.nbytes());
    return;
  }
  for (size_t i = 0; i < buffer.size(); ++i) {
    std::memcpy(out.data<uint8_t>() + i * size,
                buffer.data<uint8_t>() + mx::elem_to_loc(static_cast<int64_t>(i), buffer) * size, size);
  }
}

}  // namespace

void write_heads_in_place(const mx::array& buffer, const float* rows, const int32_t* slots, const int32_t* positions,
                          int64_t B) {
  const int64_t heads = buffer.shape(1), dim = buffer.shape(3), size = buffer.itemsize();
  const auto& st = buffer.strides();
  // (The stack's caller keeps the buffer as it is: its memory, not a copy, is what the next pass reads.)
  uint8_t* base = const_cast<uint8_t*>(buffer.data<uint8_t>());
  std::vector<uint8_t> row(dim * size);
  for (int64_t b = 0; b < B; ++b) {
    if (slots[b] < 0 || slots[b] >= buffer.shape(0) || positions[b] < 0 || positions[b] >= buffer.shape(2)) continue;
    for (int64_t h = 0; h < heads; ++h) {
      uint8_t* at = base + (slots[b] * st[0] + h * st[1] + positions[b] * st[2]) * size;
      const float* src = rows + (b * heads + h) * dim;
      if (st[3] == 1) {
        write_row(buffer.dtype(), src, at, dim);
        continue;
      }
      write_row(buffer.dtype(), src, row.data(), dim);
      for (int64_t d = 0; d < dim; ++d) std::memcpy(at + d * st[3] * size, row.data() + d * size, size);
    }
  }
}

template <>
void KVWrite::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const auto& buffer = inputs[0];
  auto& out = outputs[0];
  // Whether the buffer can be taken over is asked first: the encoder holds its inputs, and a buffer held twice
  // is never donatable (nor is one input to a primitive of two outputs: each holds it).
  const bool taken = buffer.is_donatable() && buffer.flags().row_contiguous;
  if (taken) {
    out.copy_shared_buffer(buffer);
  } else {
    out.set_data(mx::allocator::malloc(out.nbytes()));
  }
  auto& encoder = mx::cpu::get_command_encoder(stream());
  for (const auto& a : inputs) encoder.set_input_array(a);
  encoder.set_output_array(out);
  dispatch(encoder, "K/V write", [inputs, out, taken]() mutable {
    if (!taken) copy_row_major(inputs[0], out);
    std::vector<int32_t> at_copy;
    std::vector<float> copy;
    const int32_t* at = row_major(inputs[2], at_copy);
    const float* rows = row_major(inputs[1], copy);
    const int64_t dim = out.shape(3), size = out.itemsize(), held = static_cast<int64_t>(out.size()) / dim;
    for (int64_t r = 0; r < static_cast<int64_t>(inputs[2].size()); ++r) {
      if (at[r] >= 0 && at[r] < held) write_row(out.dtype(), rows + r * dim, out.data<uint8_t>() + at[r] * dim * size, dim);
    }
  });
}

mx::array kv_write(const mx::array& buffer, const mx::array& rows, const mx::array& at) {
  if (buffer.ndim() != 4 || buffer.shape(3) < 1 ||
      (buffer.dtype() != mx::float32 && buffer.dtype() != mx::float16 && buffer.dtype() != mx::bfloat16)) {
    throw std::invalid_argument("kv_write: the buffer is (slots, heads, capacity, dim) float32, float16 or bfloat16");
  }
  if (rows.dtype() != mx::float32 || rows.ndim() != 4 || rows.shape(2) != 1 || rows.shape(3) != buffer.shape(3) ||
      at.ndim() != 2 || rows.shape(0) != at.shape(0) || rows.shape(1) != at.shape(1)) {
    throw std::invalid_argument("kv_write: rows are (B, heads, 1, dim) float32 of the buffer's dim, at is (B, heads)");
  }
  auto stream = mx::default_stream(mx::Device::cpu);
  return mx::array(buffer.shape(), buffer.dtype(), std::make_shared<KVWrite>(stream, KVWriteParams{}),
                   {buffer, rows, mx::astype(at, mx::int32, stream)});
}

}  // namespace mlxchat
