// Sequoia's forward on a CUDA device, fp32 or its dense layers in tf32 / bf16 (CUDA builds only; elsewhere the model refuses with
// detail::refuse_without_cuda_backend): the weights uploaded once, the hierarchy and the neighbour lists
// built on the device for a plan (downloaded into it, uploaded once per plan), every layer and both heads
// on the device, from and to host or device rows. share/docs/sequoia.md, "On a CUDA device".
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "../share.hpp"
#include "surrogate/model.hpp"  // Precision
#include "surrogate/sequoia.hpp"

namespace surrogate::sequoia::gpu {

class DeviceForward {
 public:
  virtual ~DeviceForward() = default;
  /// The device the weights live on.
  virtual int device() const = 0;
  /// The arithmetic of the dense layers from the next forward on: fp32, or tf32 / bf16 on the tensor cores.
  virtual void set_precision(Precision precision) = 0;
  /// Network::forward(share, ...) on the device, host arrays in and out: a whole share (every node of `h`
  /// on this rank), or a split one (collective over `comm`: the halo and voxel rows move between the
  /// ranks' devices through the share's exchange plans; an error of one rank is agreed before any move).
  /// `geometry` names (s, h) (Plan::hierarchy_serial()): called again with the same number, the forward
  /// keeps the hierarchy's arrays it uploaded for it and uploads only the features; 0 uploads everything.
  virtual std::vector<float> forward(const Comm& comm, const Share& s, const Hierarchy& h, const float* features,
                                     const float* sample_features, std::uint64_t geometry = 0) = 0;
  /// The same on rows in this device's memory (predict_device): `features` (the share's points x c, row
  /// stride c) -> a segmentation model's `out` (the share's points x n_part, row stride n_part), enqueued
  /// on stream(), returning nothing; nothing waits for the device but a split share's moves through a
  /// staged transport. A classification model returns its B x classes host values (one download, `out`
  /// unused); `sample_features` (the class vectors) are host values, as for forward().
  virtual std::vector<float> forward_rows(const Comm& comm, const Share& s, const Hierarchy& h, const float* features,
                                          const float* sample_features, std::uint64_t geometry, float* out) = 0;
  /// Device arrays for forward_rows of at least `rows` rows of c (input_rows) and n_part (output_rows)
  /// values, kept by the forward (grown, never shrunk; valid until the next call).
  virtual float* input_rows(std::int64_t rows) = 0;
  virtual float* output_rows(std::int64_t rows) = 0;
  /// The stream (a cudaStream_t) every forward enqueues on.
  virtual void* stream() const = 0;
  /// nearest_lists (neighbours.hpp) computed on this device: the same lists (a plan's NearestFinder).
  virtual std::vector<std::int64_t> nearest_lists(const std::vector<float>& positions,
                                                  const std::vector<std::int64_t>& batch, int k,
                                                  const std::vector<std::int64_t>& queries) = 0;
  /// collate(build_sample_hierarchies(samples, divide, depth), sample_ids) computed on this device: the
  /// same hierarchy and the same errors (a plan's HierarchyBuilder), but for coords, mapping and
  /// mapping_local, which only the collation reads: left empty, not copied from the device.
  virtual Hierarchy hierarchy(const std::vector<SamplePoints>& samples, int divide, int depth,
                              std::vector<index_t> sample_ids) = 0;
};

/// Uploads the network's weights to CUDA device `device` (or the emulated device). Throws
/// Error(unsupported) when no such device is visible. The network must outlive the result.
std::unique_ptr<DeviceForward> make_cuda_forward(const Network& net, int device);

}  // namespace surrogate::sequoia::gpu
