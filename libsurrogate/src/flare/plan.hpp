// What FLARE builds once per point set (share/docs/model-format.md §4.1, "Plan"): the CPU forward's tiles
// and the sample of every local segment, from the layout; the tables a CUDA forward adds on first use.
#pragma once

#include <memory>
#include <vector>

#include "surrogate/model.hpp"

namespace surrogate::flare {

/// Rows of a tile, the CPU forward's unit of work: 4 MLP blocks of 60 rows (multiples of the kernels'
/// 6-row micro-kernel).
inline constexpr index_t kTileRows = 240;

/// Rows [begin, begin + rows) of local segment `segment`; a tile never straddles two samples.
struct Tile {
  index_t begin, rows;
  int segment;
};

/// What a device forward keeps per point set on one device (CUDA builds: cuda/tables.hpp).
class DeviceTables {
 public:
  virtual ~DeviceTables() = default;
  int device() const { return device_; }

 protected:
  explicit DeviceTables(int device) : device_(device) {}

 private:
  int device_;
};

/// FLARE moves no rows between ranks (the encode merges are allreduces on the Comm or the DeviceTransport),
/// so its traffic() stays zero.
class Plan final : public surrogate::Plan {
 public:
  explicit Plan(Basis basis);

  /// The local segments' tiles in row order (segment by segment).
  const std::vector<Tile>& tiles() const { return tiles_; }
  /// Number of local segments (samples with points on this rank).
  int segments() const { return static_cast<int>(segment_sample_.size()); }
  /// The global sample of every local segment, and that sample's global number of points.
  const std::vector<index_t>& segment_sample() const { return segment_sample_; }
  const std::vector<index_t>& segment_size() const { return segment_size_; }

  /// The tables a device forward built for `device`, or null (none yet, or built for another device).
  const DeviceTables* device_tables(int device) const {
    return device_tables_ && device_tables_->device() == device ? device_tables_.get() : nullptr;
  }
  /// Keeps `tables` (replacing those of another device).
  void set_device_tables(std::unique_ptr<DeviceTables> tables) { device_tables_ = std::move(tables); }

 private:
  std::vector<Tile> tiles_;
  std::vector<index_t> segment_sample_, segment_size_;
  std::unique_ptr<DeviceTables> device_tables_;
};

}  // namespace surrogate::flare
