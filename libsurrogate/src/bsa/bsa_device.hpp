// The BSA forward on a CUDA device (implemented in a CUDA build, bsa_cuda.cpp; elsewhere the factory
// refuses, bsa_device_stub.cpp). The ball tree and its rotation are built on the host (by the caller);
// the arrays that depend only on the geometry (tree order, rotated order, positions and ball-relative
// positions in both orders, the index arrays of the block compression) are uploaded once per geometry,
// the weights once per model, and the layers (norms, projections, the three attention branches, the
// compression MLPs, the gate, SwiGLU, the long residual) run on the device. The top-S block selection
// runs on the host, with the CPU forward's own select_blocks, on the compressed blocks (and, with
// token-level importance, the token queries) downloaded once per sparse layer; the chosen block indices
// go back up. fp32. Internal to libsurrogate.
// Several ranks (forward_distributed): every rank runs the layers on its own slots of the distributed
// tree (DistributedPlan, bsa_distributed.hpp, builds it on the host); what crosses ranks goes through host
// memory and the CPU path's MPI plans: the rotated layers' exchange, the compressed K/V all-gather, the
// selected blocks fetched from their owners, the global branch's sample K/V (bsa_cuda_distributed.cpp).
//
// NOT YET RUN ON A GPU: written and compiled on a machine without a device (share/docs/balltree.md).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "bsa_stages.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/balltree_distributed.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/comm.hpp"

namespace surrogate::bsa::detail {

/// A rank's part of the distributed forward, as DistributedPlan built it (host data, valid during the
/// call; the plans are applied through their bound communicator, which must be `comm`).
struct DistributedRows {
  const Comm* comm = nullptr;
  const balltree::DistributedTree* tree = nullptr;  // the rank's slots (owners of the blocks)
  const RowLayout* layout = nullptr;                // the local slots cut at sample boundaries
  std::span<const float> positions;                 // layout->rows x d, tree order
  std::span<const float> rotated_positions;         // the same in rotated order (rotated models)
  const ExchangePlan* rotation = nullptr;     // tree order -> rotated order (rotated models)
  const ExchangePlan* sample_rows = nullptr;  // global attention: the rows of the partial samples
};

class BsaDeviceForward {
 public:
  virtual ~BsaDeviceForward() = default;
  /// The device the weights live on.
  virtual int device() const = 0;
  /// Network::forward(trees, features, positions, batch, threads) on the device: host arrays in the
  /// caller's order, returns points x c_hidden values in input order. `threads`: host threads of the
  /// block selection (<= 0: OpenMP's default). `same_geometry`: trees, positions and batch are those of
  /// the previous call, whose uploaded geometry is reused (ignored on the first call). Throws
  /// Error(input) as Network::forward does.
  virtual std::vector<float> forward(const balltree::RotatedTrees& trees, std::span<const float> features,
                                     std::span<const float> positions, const balltree::Batch& batch,
                                     bool same_geometry, int threads) = 0;
  /// The layers on this rank's slots of the distributed tree: slot_features (layout->rows x c_in, tree
  /// order, padding duplicates filled) -> layout->rows x c_hidden values in tree order, bitwise the rows
  /// of forward() on the whole batch on one rank. Collective over rows.comm: every rank calls it with the
  /// same model; an error on one rank (device, input) is the same Error on all. `same_geometry`: `rows`
  /// is the plan of the previous distributed call (its uploaded positions and exchange lists are reused).
  virtual std::vector<float> forward_distributed(const DistributedRows& rows, std::span<const float> slot_features,
                                                 bool same_geometry, int threads) = 0;
  /// Device milliseconds of the last forward from the features' upload to the result's download (CUDA
  /// events; includes the host selection's waits), and of its geometry upload (0 when reused).
  virtual double last_forward_ms() const = 0;
  virtual double last_geometry_ms() const = 0;
};

/// Uploads the network's weights to CUDA device `device`. Throws Error(unsupported) when this build has
/// no CUDA backend, no such device is visible, or the network is outside what the kernels cover (head
/// width > 64, more than 4 coordinates). The network must outlive the result.
std::unique_ptr<BsaDeviceForward> make_bsa_cuda_forward(const Network& net, int device);

}  // namespace surrogate::bsa::detail
