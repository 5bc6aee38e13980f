// The ShapeNet-Car wrapper of the official Erwin and BSA experiments, written once for both families and
// both Ops (ops/rows.hpp): the network's input features [cos(p A^T), sin(p A^T)] of the point positions
// (A = pos_enc.linear.weight), and its output through pred_head (Linear, exact GELU, Linear to one value).
// share/docs/balltree.md, "The ShapeNet-Car wrapper".
#pragma once

#include <span>
#include <vector>

#include "../ops/host_ops.hpp"
#include "../ops/rows.hpp"
#include "surrogate/model_file.hpp"

namespace surrogate::balltree::wrapper {

using ops::Rows;

template <class Ops>
struct Layers {
  typename Ops::Vector frequencies;  // pos_enc.linear.weight: (c_in / 2) x dimensionality
  typename Ops::Dense head0, head2;  // pred_head.0 (D -> D), pred_head.2 (D -> 1)
};

/// The wrapper's weights in `file` (pos_enc.linear.weight, pred_head.0, pred_head.2; their shapes
/// checked by the caller).
Layers<ops::HostOps> read(const ModelFile& file);

/// The layers of one Ops as another's (Dense and Vector overloads of `f`).
template <class To, class From, class F>
Layers<To> convert(const Layers<From>& from, const F& f) {
  return {f(from.frequencies), f(from.head0), f(from.head2)};
}

/// features (c_in values a row) of positions (dimensionality values a row).
template <class Ops>
void features(Ops& ops, const Layers<Ops>& w, const Rows& positions, const Rows& features) {
  ops.fourier({&w.frequencies, positions, features});
}

/// out (one value a row) = pred_head(y); hidden: y.rows rows of y.width work values.
template <class Ops>
void head(Ops& ops, const Layers<Ops>& w, const Rows& y, const Rows& hidden, const Rows& out) {
  ops.dense({&w.head0, y, hidden, kernels::Activation::gelu_erf});
  ops.dense({&w.head2, hidden, out});
}

/// On the CPU over `threads` threads: positions (points x dim) -> points x c_in features, and
/// y (points x width) -> points values.
std::vector<float> fourier(const Layers<ops::HostOps>& w, std::span<const float> positions, int dim, int threads);
std::vector<float> head(const Layers<ops::HostOps>& w, std::span<const float> y, int width, int threads);

}  // namespace surrogate::balltree::wrapper
