// CPU compute kernels: one implementation per instruction set (generic, AVX2, AVX-512) behind one table
// of function pointers chosen at run time. Kernels are single-threaded and work on a block of rows; the
// caller distributes blocks over threads. They never allocate heap memory.
//
// Layout conventions shared by every kernel:
//  * activations are row-major, one point per row; every row stride (`ld*`) is a multiple of kPad floats
//    and at least round_up(width, kPad), and the padding columns of a buffer hold finite values (the
//    kernels write zeros there), so kernels may load and store whole padded rows;
//  * per-channel parameters (norm weights, biases) are padded with zeros to a multiple of kPad;
//  * a row's result never depends on the other rows of the block: the same point gives the same bits
//    whatever block, thread or MPI rank it is computed in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "surrogate/kernels/aligned_buffer.hpp"
#include "surrogate/kernels/cpu_kernel_list.hpp"

namespace surrogate::kernels {

using index_t = std::int64_t;
inline constexpr int kPad = 16;
constexpr index_t round_up(index_t n, index_t m) { return (n + m - 1) / m * m; }

/// gelu_tanh: PyTorch's GELU(approximate='tanh'); gelu_erf: the exact GELU 0.5 x (1 + erf(x / sqrt(2))).
/// relu: max(x, 0) with NaN and -0 kept (relu_keep_nan, nan_keeping.hpp), as torch.relu.
enum class Activation : std::uint8_t { none, gelu_tanh, silu, gelu_erf, relu };
enum class Isa : std::uint8_t { generic, avx2, avx512 };
const char* to_string(Isa isa) noexcept;
/// What runs the Linear layers of a kernel table: FP32 FMAs, or BF16 operands with FP32 accumulation on
/// AMX tiles (TDPBF16PS) or AVX512-BF16 dot products (VDPBF16PS).
enum class LinearEngine : std::uint8_t { fp32, amx_bf16, avx512_bf16 };
const char* to_string(LinearEngine engine) noexcept;

/// A torch.nn.Linear packed for the kernels: W^T as [in][out_pad] and the bias padded with zeros.
class PackedLinear {
 public:
  PackedLinear() = default;
  /// weight: (out, in) row-major as PyTorch stores it; bias: out values or nullptr.
  PackedLinear(const float* weight, const float* bias, int out, int in);
  int in() const noexcept { return in_; }
  int out() const noexcept { return out_; }
  int out_pad() const noexcept { return out_pad_; }
  const float* wt() const noexcept { return wt_.data(); }
  const float* bias() const noexcept { return bias_.data(); }
  /// W (out, in) row-major as the constructor took it, read back from W^T (a copy, exact).
  std::vector<float> weight() const;
  /// Whether the layer was given a bias (without, bias() holds zeros, which the FP32 kernels add).
  bool has_bias() const noexcept { return has_bias_; }
  /// W^T rounded to BF16 (nearest even) in pairs of inputs, the operand layout of TDPBF16PS and
  /// VDPBF16PS: element (k, o) at [(k / 2) * out_pad + o] * 2 + k % 2, in_bf16_pad() rows, rows from in()
  /// on zero. Built on the first call (thread-safe), so FP32-only users never pay for it.
  const std::uint16_t* wt_bf16() const;
  /// in() rounded up to the 32 inputs of one AMX tile.
  int in_bf16_pad() const noexcept { return static_cast<int>(round_up(in_, 32)); }

 private:
  struct Bf16Copy;
  int in_ = 0, out_ = 0, out_pad_ = 0;
  bool has_bias_ = false;
  AlignedBuffer<float> wt_, bias_;
  std::shared_ptr<Bf16Copy> bf16_;  // created with the weights; packed on first use
};

/// y = act(x W^T + b) [+ add1] [+ add2], over `rows` rows; y gets the full padded width.
/// add1/add2 may alias y (element-wise in-place residual); x must not alias y.
struct LinearArgs {
  const PackedLinear* layer = nullptr;
  const float* x = nullptr;
  index_t ldx = 0;
  float* y = nullptr;
  index_t ldy = 0;
  index_t rows = 0;
  Activation act = Activation::none;
  const float* add1 = nullptr;
  index_t ld_add1 = 0;
  const float* add2 = nullptr;
  index_t ld_add2 = 0;
};

/// LayerNorm (biased variance; bias may be null) or RMSNorm (rms = true, no bias) over `dim` channels.
struct NormArgs {
  const float* x = nullptr;
  index_t ldx = 0;
  float* y = nullptr;  // may equal x
  index_t ldy = 0;
  index_t rows = 0;
  int dim = 0;
  const float* weight = nullptr;  // padded to round_up(dim, kPad)
  const float* bias = nullptr;    // padded, or nullptr
  float eps = 1e-5f;
  bool rms = false;
};

/// One head of latent (FLARE) attention over a block of rows. q holds the M latent queries of the head
/// (M x E, row-major) already multiplied by the attention scale; k, v, y point at the head's E columns.
///
/// Encode, streaming form. With l_mn = q_m . k_n, ADDS this block's terms to running sums kept relative
/// to a power of two 2^ref_exp[m] (chosen so that the largest term is below 1):
///   sum[m] += sum_n 2^(l_mn log2(e) - ref_exp[m]),  weighted[m*E + e] += sum_n 2^(...) v_ne,
/// rescaling what the arrays already hold (exactly, by a power of two) when ref_exp[m] grows. Each term is
/// a float whose bits depend only on l_mn (2^(l log2 e) is evaluated before the exact power-of-two shift)
/// and the sums are double, so the result depends on how the points are split into blocks, threads or
/// ranks only through double rounding (about 1e-16 relative).
inline constexpr std::int32_t kNoExponent = -2147483647 - 1;  // ref_exp before any term
struct LatentEncodeArgs {
  const float* q = nullptr;
  int M = 0, E = 0;
  const float* k = nullptr;
  index_t ldk = 0;
  const float* v = nullptr;
  index_t ldv = 0;
  index_t rows = 0;
  std::int32_t* ref_exp = nullptr;  // [M], in/out; start at kNoExponent
  double* sum = nullptr;            // [M], in/out; start at 0
  double* weighted = nullptr;       // [M*E], in/out; start at 0
  /// Optional block selection from the same logits (BSA's coarse branch with block-level importance),
  /// when select_S > 0: q is NOT pre-scaled and the logits are l_mn = (q_m . k_n) * logit_scale, which is
  /// bit for bit TopKeysArgs' score; for every latent the select_S keys with the largest l (keys in
  /// [mask_begin[m], mask_end[m]) excluded when mask_begin is set; equal scores: the lower key) are
  /// written in ascending order to sel + m * select_S, exactly as top_keys chooses them. The call must
  /// hold all the latents' keys (the selection does not continue across calls); no bias;
  /// M <= kMaxSelectLatents; select_S <= min(rows, kMaxTopKeys). In this mode the terms (the same floats)
  /// are summed in float lanes within each chunk of keys and the lane sums added in double, which is
  /// cheaper; a latent's result still depends only on its logits and the keys' chunking (fixed by E).
  float logit_scale = 1.0f;
  int select_S = 0;
  const index_t* mask_begin = nullptr;  // [M], with mask_end, or nullptr: no mask
  const index_t* mask_end = nullptr;
  std::int32_t* sel = nullptr;  // [M * select_S]
};
inline constexpr int kMaxSelectLatents = 64;

/// Largest head width of the CPU attention kernels (latent encode/decode, ball attention). Widths 4, 8
/// and 16 have specialised code; other widths run the generic loops, whose stack buffers are sized for
/// this maximum (at most about 0.25 MiB of stack per call, in the selecting encode).
inline constexpr int kMaxAttentionHeadDim = 512;

/// Multi-head self-attention inside one ball of m points (Erwin's BMSA, BSA's local branch), on the
/// latent decode above with the ball's queries as its points and its keys as the latents: for every row i
/// and head h,
///   out[i, hE:(h+1)E] = sum_j softmax_j(scale q_i . k_j + sigma_h bias_ij) v_j
/// (q/k/v of head h: the E columns from hE of row i at q + i*ld, likewise k and v; bias: m x m with
/// row i at bias + i*ld_bias, **symmetric** (bias_ij = bias_ji: the distances |p_i - p_j| of
/// ball_distances), read key-major; no bias term when sigma is null). The queries are multiplied by
/// `scale` first (float); each query's softmax is over its exact maximum, its terms and weighted values
/// summed in float in key order (beyond 256 keys per block, the blocks in double), the output rounded once. Row
/// i's result depends only on q_i and the ball's keys, values and bias, never on the number of threads or
/// ranks, nor on the instruction set among those with FMA. E <= kMaxAttentionHeadDim. Single-threaded, no
/// heap allocation.
struct BallAttentionArgs {
  int m = 0;
  int heads = 0, E = 0;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  index_t ld = 0;
  float scale = 1.0f;
  const float* sigma = nullptr;  // [heads], or nullptr: no bias
  const float* bias = nullptr;   // read only when sigma is set
  index_t ld_bias = 0;
  float* out = nullptr;
  index_t ldo = 0;
};

/// The distance tile of a ball of m points (dim coordinates each, row-major in `pos`):
///   dist[i*ld_dist + j] = sqrt(sum_c (pos[i*dim + c] - pos[j*dim + c])^2)   (i, j < m)
/// in float, the squares rounded and added from c = 0 in order (no fused multiply-add), the square root
/// correctly rounded: bitwise the plain scalar loop on every instruction set (torch.cdist's formula for
/// small inputs; the CUDA ball attention computes the same). Single-threaded, no heap allocation.
struct BallDistanceArgs {
  const float* pos = nullptr;
  int m = 0, dim = 0;
  float* dist = nullptr;
  index_t ld_dist = 0;
};

/// Attention of consecutive output longitudes on a latitude ring whose neighbour lists are one list
/// shifted in longitude (NeighborhoodAttentionS2's gather mode), one head. Query i (i < count) is output
/// longitude first + i of a ring of `ring` longitudes; neighbour entry n of the list (the list of output
/// longitude 0) is, for query i, the key/value at ring position (ring_pos[n] + first + i) mod ring of the
/// transposed rows whose channel 0 starts at key_base[n] (keys) and value_base[n] (values): channel e of
/// that position is at kt[key_base[n] + e * ld_ring + position], likewise vt with value_base. Positions
/// ring .. ring + kRingPad - 1 must repeat positions 0 .. kRingPad - 1 (mod ring), so the kernel loads
/// the queries' keys of one entry as one contiguous vector. The result is the quadrature-weighted softmax
///   out[i*ldo + e] = sum_n exp(q_i . k_n) weight[n] v_ne / sum_n exp(q_i . k_n) weight[n]
/// with q already scaled; every term is the streaming encode's (LatentEncodeArgs): a float whose bits
/// depend only on the logit and a running power-of-two reference per query, times weight[n] rounded to
/// float; the terms and the weighted values are summed in float in entry order within chunks of 32
/// entries, the chunks' sums added in double, the quotient rounded to float once (a list of at most 32
/// entries: one chunk, out = weighted sum * (1 / sum) in float), an error of at most about 2 * 32 float32 ulps of
/// max |v| beyond the terms' own. A query's result does not depend on `first`,
/// `count` or where its lane sits (bitwise). No entries: NaN (0/0), as torch-harmonics. Single-threaded,
/// no heap allocation; ek, ev <= kMaxAttentionHeadDim.
inline constexpr int kRingPad = 16;
struct RingAttentionArgs {
  int ek = 0, ev = 0;             // key (logit) and value widths of the head
  const float* q = nullptr;       // query i's ek channels at q + i * ldq
  index_t ldq = 0;
  int count = 0, first = 0, ring = 0;
  const float* kt = nullptr;
  const float* vt = nullptr;
  index_t ld_ring = 0;            // >= ring + kRingPad
  index_t entries = 0;
  const index_t* key_base = nullptr;    // [entries]
  const index_t* value_base = nullptr;  // [entries]
  const std::int32_t* ring_pos = nullptr;  // [entries], in [0, ring)
  const float* weight = nullptr;           // [entries], positive
  float* out = nullptr;           // query i's ev channels at out + i * ldo
  index_t ldo = 0;
};

/// Transposition of a block of floats: d[c * ldd + r] = s[r * lds + c] for r < rows, c < cols, into
/// floats (d) or doubles (d_double, the values converted exactly); exactly one destination is set. Used to
/// build channel-major (transposed) operand rows from projected point rows. Single-threaded.
struct TransposeArgs {
  const float* s = nullptr;
  index_t lds = 0;
  float* d = nullptr;
  double* d_double = nullptr;
  index_t ldd = 0;
  index_t rows = 0;
  int cols = 0;
};

/// Block selection (BSA's importance scores and top-S), for `rows` rows: the score of key g is
///   s_g = (sum_t scale * (q_t . k_g)) / group  over the row's `group` queries (query t of row r: E floats
/// at q + (r * group + t) * ldq), and -inf for g in [mask_begin[r], mask_end[r]) when mask_begin is set.
/// The S largest scores win, equal scores go to the lower key index; the S keys are written in ascending
/// order to sel + r * S. Keys transposed: channel e of key g at kt[e * ldk + g], ldk >=
/// round_up(keys, kPad), padding columns finite. S <= min(keys, kMaxTopKeys). Optional per-row outputs:
/// kth[r] = the S-th best score, next[r] = the best score not chosen (-inf if none). No score row is
/// stored; a row's result does not depend on the other rows. Single-threaded, no heap allocation.
inline constexpr int kMaxTopKeys = 256;
struct TopKeysArgs {
  const float* q = nullptr;
  index_t ldq = 0;
  int group = 1, E = 0;
  index_t rows = 0;
  const float* kt = nullptr;
  index_t ldk = 0;
  index_t keys = 0;
  float scale = 1.0f;
  const index_t* mask_begin = nullptr;  // [rows], with mask_end, or nullptr: no mask
  const index_t* mask_end = nullptr;
  int S = 0;
  std::int32_t* sel = nullptr;  // [rows * S]
  float* kth = nullptr;         // [rows] or nullptr
  float* next = nullptr;        // [rows] or nullptr
};

/// Decode: y_n = sum_m softmax_m(q_m . k_n) z_m  (z: M x E latent values of the row's sample).
/// Optional (the ball attention, the global S² attention): latent rows at strides ldq and ldz (0: E,
/// contiguous), each point component multiplied by k_scale first (float; 1: none), and one additive bias:
/// bias_scale * bias[m * ld_bias + n] of latent m and row n (latent-major), or latent_bias[m] on every
/// row's logit of latent m (null: none; not both).
struct LatentDecodeArgs {
  const float* q = nullptr;
  const float* z = nullptr;
  int M = 0, E = 0;
  const float* k = nullptr;
  index_t ldk = 0;
  float* y = nullptr;
  index_t ldy = 0;
  index_t rows = 0;
  index_t ldq = 0, ldz = 0;
  float k_scale = 1.0f;
  const float* bias = nullptr;
  index_t ld_bias = 0;
  float bias_scale = 1.0f;
  const float* latent_bias = nullptr;
};

/// Fixed-point representation used by the reproducible encode: a term t (|t| <= maxabs) becomes
/// hi = trunc(t 2^hi_bits) and lo = trunc((t 2^hi_bits - hi) 2^lo_bits), both int64, chosen so that
/// `count` terms never overflow. Integer sums are exact, so they do not depend on the order of the terms
/// (threads, MPI ranks, partition). The value is hi 2^-hi_bits + lo 2^-(hi_bits+lo_bits).
struct ExactScale {
  int hi_bits = 0;
  int lo_bits = 0;
};
ExactScale exact_scale(index_t count, double maxabs) noexcept;
double exact_value(std::int64_t hi, std::int64_t lo, ExactScale scale) noexcept;

/// Reproducible encode, pass 1: max[m] = max(max[m], max_n q_m . k_n).
struct LatentMaxArgs {
  const float* q = nullptr;
  int M = 0, E = 0;
  const float* k = nullptr;
  index_t ldk = 0;
  index_t rows = 0;
  float* max = nullptr;  // [M], in/out
};

/// Reproducible encode, pass 2: with p_mn = exp(q_m . k_n - ref_max[m]) (ref_max: the global maximum),
/// adds the fixed-point images of p_mn (scale sum_scale) and p_mn v_ne (scale value_scale) to
/// acc[(m*(E+1) + c)*2 + {0: hi, 1: lo}], c = 0 for the sum and 1 + e for the values. A term whose image
/// would not fit (NaN or Inf keys, values or logits; a value beyond the scale's maximum) is left out of
/// acc and counted in bad[m] instead: the latent's result is then not a number.
struct LatentExactArgs {
  const float* q = nullptr;
  int M = 0, E = 0;
  const float* k = nullptr;
  index_t ldk = 0;
  const float* v = nullptr;
  index_t ldv = 0;
  index_t rows = 0;
  const float* ref_max = nullptr;
  ExactScale sum_scale, value_scale;
  std::int64_t* acc = nullptr;
  std::int64_t* bad = nullptr;  // [M], in/out
};

/// HEPT's bucket attention of one bucket in float32 or float64 (surrogate/kernels/bucket_attention.hpp: the
/// formula, the argument meanings and the scratch size gaussian_bucket_scratch).
template <class T>
struct GaussianBucketArgsOf {
  const T* q = nullptr;
  index_t ldq = 0;
  const std::int64_t* qrow = nullptr;
  const T* k = nullptr;
  index_t ldk = 0;
  const std::int64_t* krow = nullptr;
  const T* v = nullptr;
  index_t ldv = 0;
  int m = 0, dh = 0, dv = 0;
  T* num = nullptr;
  T* den = nullptr;
  T* scratch = nullptr;
  /// Optional: up to three byte ranges the caller reads in its next call (the next bucket's rows, when they
  /// stream from arrays larger than the caches). The kernel asks the caches for them a few lines per group
  /// of queries, spread over its work rather than in one burst.
  const void* next[3] = {nullptr, nullptr, nullptr};
  std::size_t next_bytes[3] = {0, 0, 0};
};
using GaussianBucketArgs = GaussianBucketArgsOf<float>;
using GaussianBucketArgs64 = GaussianBucketArgsOf<double>;

/// y = x W^T (+ b) in float64 over `rows` rows of the layer's float weights (widened exactly): every output
/// the sum over the inputs in ascending order (fused multiply-adds where the instruction set has them),
/// then the bias when the layer has one. Only columns [0, out) of y are written; x must not alias y.
struct LinearF64Args {
  const PackedLinear* layer = nullptr;
  const double* x = nullptr;
  index_t ldx = 0;
  double* y = nullptr;
  index_t ldy = 0;
  index_t rows = 0;
};

struct TreeAttentionArgs;  // surrogate/kernels/tree_attention.hpp

struct CpuKernels {
  Isa isa = Isa::generic;
  int simd_width = 4;
  LinearEngine linear_engine = LinearEngine::fp32;
  /// Rows per `linear` call that suit the engine (a layer's operands stay in cache; AMX amortises its
  /// tile work over more rows): what chains of layers such as ResidualMlp pass at a time.
  int linear_rows = 60;
  /// The kernels, one function pointer per entry of SURROGATE_CPU_KERNELS (cpu_kernel_list.hpp, which
  /// documents them and how to add one): linear, norm, latent_encode, ..., softmax_exp.
#define SURROGATE_CPU_KERNEL_MEMBER(name, parameters) void(*name) parameters = nullptr;
  SURROGATE_CPU_KERNELS(SURROGATE_CPU_KERNEL_MEMBER)
#undef SURROGATE_CPU_KERNEL_MEMBER
};

/// The kernels of the best instruction set this CPU supports. The environment variable
/// SURROGATE_CPU_ISA (generic, avx2, avx512) selects a lower one; asking for one the CPU lacks is an
/// error (std::runtime_error).
const CpuKernels& cpu();
/// Makes cpu() return `table` (nullptr: the detected kernels again). For tests and accuracy studies that
/// substitute other arithmetic (e.g. emulated reduced-precision Linear layers); `table` must outlive its
/// use, and it must not be changed while a forward runs.
void replace_cpu_kernels(const CpuKernels* table) noexcept;
/// The kernels of one instruction set, or nullptr when this CPU cannot run it.
const CpuKernels* cpu(Isa isa) noexcept;
Isa best_cpu_isa() noexcept;

/// cpu() with `linear` replaced by the BF16 Linear layers: x and W rounded to BF16 (nearest even; the
/// instructions read subnormal BF16 operands as zero), products accumulated in FP32, then the bias, the
/// activation and the residuals in FP32, as the CUDA tensor-core MLP (Precision::bf16). The engine is the
/// best this CPU and its operating system offer (AMX-BF16, else AVX512-BF16); SURROGATE_CPU_BF16 (amx,
/// avx512bf16) selects one. Throws std::runtime_error naming what is missing when there is none, or when
/// SURROGATE_CPU_BF16 asks for one this CPU lacks.
const CpuKernels& cpu_bf16();
/// The BF16 kernels of one engine, or nullptr when this CPU (or its operating system) cannot run them
/// (throws only what cpu() throws).
const CpuKernels* cpu_bf16(LinearEngine engine);
/// Why cpu_bf16() is unavailable on this CPU ("" when it is available).
const char* bf16_unavailable_reason() noexcept;

/// Row-major single-precision GEMM through BLAS: C = alpha A B^T + beta C with A (m x k), B (n x k).
/// Used where a general GEMM wins and as an independent reference in tests.
void blas_gemm_abt(index_t m, index_t n, index_t k, float alpha, const float* a, index_t lda, const float* b,
                   index_t ldb, float beta, float* c, index_t ldc);

}  // namespace surrogate::kernels
