// The Python module mlxchat.engine.cpu.kernels._ext: MLX ops in the domain "mlx", so they take and return mx.array.
#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "attention.h"
#include "kv_write.h"
#include "layer_ops.h"
#include "layer_stack.h"
#include "matmul.h"
#include "matmul_tasks.h"
#include "profile.h"
#include "top_k.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// The instruction set this module was built for (CMakeLists.txt builds one module per x86 level).
std::string isa() {
#if defined(__AVX512VL__)
  return "x86-64-v4 (AVX-512)";
#elif defined(__AVX2__) && defined(__FMA__)
  return "x86-64-v3 (AVX2 + FMA)";
#elif defined(__x86_64__)
  return "x86-64 (portable)";
#elif defined(__aarch64__)
  return "arm64 (NEON)";
#else
  return "portable";
#endif
}

// Which loops multiply int8 rows (int8_activations) on this CPU.
std::string int8_path() {
  using mlxchat::matmul::Int8Path;
  const Int8Path path = mlxchat::matmul::int8_path(Int8Path::fastest);
  return path == Int8Path::vnni ? "AVX-512 VNNI" : path == Int8Path::avx2 ? "AVX2" : "portable";
}

}  // namespace

// The module's name: _ext, or on x86 one per level (_ext_x86_64_v4, ...); NB_MODULE pastes its argument, so the
// name given by CMake is expanded first.
#define MLXCHAT_NB_MODULE(name, m) NB_MODULE(name, m)
MLXCHAT_NB_MODULE(MLXCHAT_MODULE, m) {
  m.doc() = "mlxchat's compiled CPU kernels";
  nb::class_<mlxchat::StackWeights>(m, "StackWeights",
                                    "A model's layers as layer_stack multiplies by them, checked and held once.");
  m.def("layer_stack_weights", &mlxchat::layer_stack_weights, "first_norm"_a, "arrays"_a, "heads"_a, "kv_heads"_a,
        "head_dim"_a, "eps"_a, "attention_scale"_a, "traditional"_a, "rope_scale"_a, "formats"_a,
        "A llama's decoder layers for layer_stack: each layer's norm weights after attention and after its MLP, its "
        "RoPE's inverse frequencies, then its q/k/v, o, gate/up and down weights as weights_matmul takes them; "
        "formats (bits, group size) of each of the four calls. Evaluated, row-contiguous arrays, held as they are.");
  m.def("layer_stack", &mlxchat::layer_stack, "h"_a, "slots"_a, "starts"_a, "weights"_a, "kv"_a, "int8"_a,
        "threads"_a,
        "A pass's llama decoder layers as one operation (rows of one token, each of slot slots[m] at position "
        "starts[m]; kv each layer's K and V buffers, int8 weights_matmul's int8 for each layer's four calls): [the "
        "final norm's output, then each layer's K and V buffers, written in place].");
  m.def("slot_attention", &mlxchat::slot_attention, "q"_a, "k"_a, "v"_a, "rows"_a, "lengths"_a, "scale"_a, "threads"_a,
        "Causal attention of row b's new queries over the first lengths[b] keys of slot rows[b] (CPU): q float32, "
        "k and v each [float32 | float16 | bfloat16 array] or [uint32 values, float32 scales, float32 biases] (8-bit).");
  m.def(
      "weights_matmul",
      [](const mx::array& x, const std::vector<mx::array>& weights, int bits, int group_size, bool swiglu, int threads,
         int int8) { return mlxchat::weights_matmul(x, weights, {bits, group_size}, swiglu, threads, int8); },
      "x"_a, "weights"_a, "bits"_a, "group_size"_a, "swiglu"_a, "threads"_a, "int8"_a = 0,
      "x (M, K), or heads of one token (M, heads, 1, dim) read as its rows, @ W.T for each weight W as stored: 4- or "
      "8-bit, given as (values, scales, biases), or float16 "
      "or bfloat16 (bits 16), given alone. With swiglu, gate and up give silu(x @ gate.T) * (x @ up.T). With "
      "int8 1, quantized weights multiply x rounded to int8 in blocks of 32 (2: the same on the portable loops, "
      "3: on AVX2's, whatever else the CPU has).");
  m.def(
      "weights_matmul_rope",
      [](const mx::array& x, const std::vector<mx::array>& weights, int bits, int group_size, int threads, int int8,
         int batch, int head_dim, int rotated, const mx::array& offsets, const mx::array& inverse, bool traditional,
         float scale) {
        return mlxchat::weights_matmul_rope(x, weights, {bits, group_size}, threads, int8, batch, head_dim, rotated,
                                            offsets, inverse, traditional, scale);
      },
      "x"_a, "weights"_a, "bits"_a, "group_size"_a, "threads"_a, "int8"_a, "batch"_a, "head_dim"_a, "rotated"_a,
      "offsets"_a, "inverse"_a, "traditional"_a, "scale"_a,
      "x (batch * length, K) @ W.T for each weight W as weights_matmul takes it, each product as heads (batch, "
      "N / head_dim, length, head_dim), the first `rotated` turned as rope_rows turns them: a layer's q, k and v "
      "and their RoPE in one operation, the same bits as the two apart.");
  m.def("kv_write", &mlxchat::kv_write, "buffer"_a, "rows"_a, "at"_a,
        "The K or V buffer (slots, heads, capacity, dim) with its rows at (B, heads) replaced by rows (B, heads, 1, "
        "dim) float32, rounded to the buffer's type (CPU; in place where MLX holds the buffer nowhere else).");
  m.def("rms_norm", &mlxchat::rms_norm, "x"_a, "weight"_a, "eps"_a,
        "x * rsqrt(mean(x ** 2, -1) + eps) * weight, row by row (float32, CPU): mx.fast.rms_norm as one operation.");
  m.def("swiglu", &mlxchat::swiglu, "gate"_a, "up"_a, "silu(gate) * up (float32, CPU), as one operation.");
  m.def("add_rms_norm", &mlxchat::add_rms_norm, "h"_a, "delta"_a, "weight"_a, "eps"_a,
        "[h + delta, rms_norm(h + delta, weight, eps)] (float32, CPU): a residual add and the next norm as one "
        "operation.");
  m.def("rope_rows", &mlxchat::rope_rows, "xs"_a, "batch"_a, "heads"_a, "offsets"_a, "inverse"_a, "traditional"_a,
        "scale"_a,
        "Rotary embedding of each rows xs[i] (batch * length, heads[i] * dim) -> (batch, heads[i], length, dim), "
        "sequence b at positions offsets[b] + j, pair f turned by position * scale * inverse[f] (float32, CPU); "
        "all in one operation.");
  m.def("top_k", &mlxchat::top_k, "x"_a, "k"_a, "threads"_a,
        "Each row's k largest values of x (B, V) and their indices (uint32), largest first, of equal values the "
        "lower index first (float32, CPU).");
  m.def("profile_start", &mlxchat::profile_start, "Clears the kernels' profile and starts counting each call's time.");
  m.def("profile_read", &mlxchat::profile_read,
        "Stops counting: (part, nanoseconds, calls) for each part of the kernels called since profile_start().");
  m.def("isa", &isa, "The instruction set this module of the kernels was built for.");
  m.def("int8_path", &int8_path, "The loops that multiply int8 rows here: AVX-512 VNNI, AVX2 or portable.");
  m.attr("mlx_version") = MLXCHAT_MLX_VERSION;
}
