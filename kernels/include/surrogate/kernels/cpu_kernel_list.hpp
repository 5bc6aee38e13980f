// The one list of the CPU kernel table's entries (kernels::CpuKernels, surrogate/kernels/cpu.hpp). It
// generates the table's function pointers (CpuKernels, in this order: the order is the table's layout)
// and every instruction set's assignments (make_table in kernels/src/cpu/isa_table.hpp), so the two
// cannot drift apart. Each entry is X(name, (parameters)): the member `void (*name)(parameters)`.
//
// Adding a kernel:
//  1. its argument struct in cpu.hpp (above CpuKernels), documented there;
//  2. its implementation, a function `name` of the entry's signature in namespace SURROGATE_ISA_NS, in a
//     kernels/src/cpu/*_impl.hpp that isa_table.hpp includes (compiled once per instruction set; an
//     element-wise map goes into isa_table.hpp's namespace maps);
//  3. one X(name, (const NameArgs&)) line at the end of the list below (the order is the table's layout).
// tests/kernels/test_kernels.cpp checks that every instruction set's table sets every entry.
#pragma once

// Comments inside the list are /* */: a // comment would swallow the continuation of the line below.
#define SURROGATE_CPU_KERNELS(X)                                                                              \
  X(linear, (const LinearArgs&))                                                                              \
  X(norm, (const NormArgs&))                                                                                  \
  X(latent_encode, (const LatentEncodeArgs&))                                                                 \
  X(latent_decode, (const LatentDecodeArgs&))                                                                 \
  X(latent_max, (const LatentMaxArgs&))                                                                       \
  X(latent_encode_exact, (const LatentExactArgs&))                                                            \
  X(ball_attention, (const BallAttentionArgs&))                                                               \
  X(ball_distances, (const BallDistanceArgs&))                                                                \
  X(top_keys, (const TopKeysArgs&))                                                                           \
  X(ring_attention, (const RingAttentionArgs&))                                                               \
  X(transpose, (const TransposeArgs&))                                                                        \
  X(gaussian_bucket, (const GaussianBucketArgs&))                                                             \
  X(gaussian_bucket_f64, (const GaussianBucketArgs64&))                                                       \
  X(linear_f64, (const LinearF64Args&))                                                                       \
  /* Sequoia's tree attention (tree_attention.hpp): bitwise the same on every instruction set. */             \
  X(tree_attention, (const TreeAttentionArgs&))                                                               \
  /* Element-wise maps (tests and benchmarks): y = exp(x); y = exp(x) in float64. */                          \
  X(exp, (const float* x, float* y, index_t n))                                                               \
  X(exp_f64, (const double* x, double* y, index_t n))                                                         \
  /* y = tanh(x) within 2^-24 (1 + 2^-17) relative (x may alias y). */                                        \
  X(tanh, (const float* x, float* y, index_t n))                                                              \
  /* y = tanh(x) in float64 within 4 u (x may alias y). */                                                    \
  X(tanh_f64, (const double* x, double* y, index_t n))                                                        \
  /* y = erf(x); y = act(x). */                                                                               \
  X(erf, (const float* x, float* y, index_t n))                                                               \
  X(activation, (Activation act, const float* x, float* y, index_t n))                                        \
  /* y = exp(x) as every softmax computes it (the cheaper reduction and polynomial of simd.hpp's              \
     softmax_exp_parts: within (3.3 + 0.225 |x|) 2^-24 relative), x <= 88.37; below -87 e^-87. */             \
  X(softmax_exp, (const float* x, float* y, index_t n))
