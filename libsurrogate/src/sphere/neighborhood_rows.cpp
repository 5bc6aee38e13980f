// NeighborhoodAttentionS2's projections and per-row softmax. The keys and values of each input latitude
// row are transposed, block by block as the projection produces them, into "rings" (per sample, head, input row and residue r = w mod p of the
// input longitude w: channel-major rows over the ring positions w / p, p = nlon_in / nlon_out, extended
// by kRingPad wrapped positions). The neighbour list of an output latitude (that of output longitude 0)
// becomes per entry a ring row offset, a ring position and the quadrature weight w_lat of its input row;
// output longitude wo reads the position shifted by wo. The kernel then takes consecutive output
// longitudes as SIMD lanes and reads each entry's keys and values as contiguous vectors.
#include "neighborhood_rows.hpp"

#include <algorithm>
#include <cstdint>

#include "surrogate/kernels/cpu.hpp"

namespace surrogate::sphere::detail {

using kernels::AlignedBuffer;
using kernels::index_t;

namespace {

constexpr int kLonBlock = 64;  // output longitudes per task (the kernel takes its SIMD width at a time)

/// Ring layout of one operand: channel e of (sample b, head h, input row lat, residue r) at ring position
/// j is at (((b*heads + h)*rows + lat)*p + r)*width + e) * ld_ring + j; positions ring .. ld_ring - 1
/// repeat positions 0 .. (mod ring).
struct RingLayout {
  int heads, width, rows, nlon_in, ring, p;
  index_t ld_ring;
  index_t head_size() const { return static_cast<index_t>(rows) * p * width * ld_ring; }
  index_t size(int batch) const { return batch * heads * head_size(); }

  /// Rows [r0, r0 + n) of the projected operand (row b*rows*nlon_in + lat*nlon_in + w, head h in columns
  /// [h*width, (h+1)*width), ld ld_src) into their ring positions.
  template <class T>
  void scatter(index_t r0, index_t n, const float* src, index_t ld_src, T* dst) const {
    const index_t points = static_cast<index_t>(rows) * nlon_in;
    for (index_t i = 0; i < n; ++i) {
      const index_t row = r0 + i, b = row / points, lat = (row % points) / nlon_in, w = row % nlon_in;
      const index_t j = w / p;
      T* d0 = dst + b * heads * head_size() + (lat * p + w % p) * width * ld_ring;
      const float* s = src + i * ld_src;
      for (index_t jj = j; jj < ld_ring; jj += ring)  // (once, or again for the wrapped positions)
        for (int h = 0; h < heads; ++h) {
          T* d = d0 + h * head_size() + jj;
          const float* sh = s + static_cast<index_t>(h) * width;
          for (int e = 0; e < width; ++e) d[e * ld_ring] = sh[e];
        }
    }
  }
};

}  // namespace

void neighborhood_attention_rows(const NeighborhoodCsr& csr, const std::vector<float>& quad_w, const S2Heads& hd,
                                 int batch, int lat_begin, int lat_end, int in_begin, int in_end, const float* query,
                                 const float* key, const float* value, float* o, index_t ld_o) {
  const kernels::CpuKernels& kern = kernels::cpu();
  const int nlon_in = csr.nlon_in, ring = csr.nlon_out, p = nlon_in / ring;
  const int H = hd.heads, ek = hd.ek, ev = hd.ev, rows_in = in_end - in_begin, rows_out = lat_end - lat_begin;
  const index_t ld_ring = kernels::round_up(ring + kernels::kRingPad, kernels::kPad);
  const index_t po = static_cast<index_t>(rows_out) * ring, pi = static_cast<index_t>(rows_in) * nlon_in;

  // Projections; the keys and values go into their rings block by block while in cache. (Buffers kept
  // per calling thread and reused across forwards: no page faults; the threads get pointers.)
  const RingLayout k_layout{H, ek, rows_in, nlon_in, ring, p, ld_ring}, v_layout{H, ev, rows_in, nlon_in, ring, p, ld_ring};
  const index_t ring_k = k_layout.head_size(), ring_v = v_layout.head_size();
  thread_local PlainOperands ops;
  thread_local AlignedBuffer<float> k_rings;
  thread_local AlignedBuffer<double> v_rings;  // (values in double: the kernel's sums are double)
  k_rings.resize(static_cast<std::size_t>(k_layout.size(batch)));
  v_rings.resize(static_cast<std::size_t>(v_layout.size(batch)));
  float* const kt = k_rings.data();
  double* const vt = v_rings.data();
  const index_t ld_k = kernels::round_up(hd.ck, kernels::kPad), ld_v = hd.ld_out();
  const S2Heads::KeyValueSink to_rings = [&](index_t r0, index_t n, const float* k, const float* v) {
    k_layout.scatter(r0, n, k, ld_k, kt);
    v_layout.scatter(r0, n, v, ld_v, vt);
  };
  hd.project_plain(batch * po, batch * pi, query, key, value, ops, &to_rings);
  const float* const q = ops.q.data();  // (the worker threads have their own thread_local `ops`)

  // The entries of the band's lists: ring row offsets (within one sample and head), positions, weights.
  const index_t first = csr.row_offsets[static_cast<std::size_t>(lat_begin)],
                count = csr.row_offsets[static_cast<std::size_t>(lat_end)] - first;
  std::vector<index_t> key_base(static_cast<std::size_t>(count)), value_base(static_cast<std::size_t>(count));
  std::vector<std::int32_t> ring_pos(static_cast<std::size_t>(count));
  std::vector<float> weight(static_cast<std::size_t>(count));
  for (index_t n = 0; n < count; ++n) {
    const std::int64_t col = csr.columns[static_cast<std::size_t>(first + n)];
    const index_t lat = col / nlon_in, w = col % nlon_in, row = (lat - in_begin) * p + w % p;
    key_base[static_cast<std::size_t>(n)] = row * ek * ld_ring;
    value_base[static_cast<std::size_t>(n)] = row * ev * ld_ring;
    ring_pos[static_cast<std::size_t>(n)] = static_cast<std::int32_t>(w / p);
    weight[static_cast<std::size_t>(n)] = quad_w[static_cast<std::size_t>(lat)];
  }

  // One task per (sample, output row, block of output longitudes); all heads in the task.
  const index_t lon_blocks = (ring + kLonBlock - 1) / kLonBlock;
  const index_t tasks = static_cast<index_t>(batch) * rows_out * lon_blocks;
#pragma omp parallel for schedule(dynamic)
  for (index_t t = 0; t < tasks; ++t) {
    const index_t b = t / (rows_out * lon_blocks), lat = (t / lon_blocks) % rows_out;
    const int wo0 = static_cast<int>((t % lon_blocks) * kLonBlock);
    const int n_lon = std::min(ring - wo0, kLonBlock);
    const index_t beg = csr.row_offsets[static_cast<std::size_t>(lat_begin + lat)] - first;
    const index_t row0 = b * po + lat * ring + wo0;
    for (int h = 0; h < H; ++h) {
      kernels::RingAttentionArgs a;
      a.ek = ek;
      a.ev = ev;
      a.q = q + row0 * ld_k + static_cast<index_t>(h) * ek;
      a.ldq = ld_k;
      a.count = n_lon;
      a.first = wo0;
      a.ring = ring;
      a.kt = kt + (b * H + h) * ring_k;
      a.vt = vt + (b * H + h) * ring_v;
      a.ld_ring = ld_ring;
      a.entries = csr.row_offsets[static_cast<std::size_t>(lat_begin + lat) + 1] - first - beg;
      a.key_base = key_base.data() + beg;
      a.value_base = value_base.data() + beg;
      a.ring_pos = ring_pos.data() + beg;
      a.weight = weight.data() + beg;
      a.out = o + row0 * ld_o + static_cast<index_t>(h) * ev;
      a.ldo = ld_o;
      kern.ring_attention(a);
    }
    for (int i = 0; i < n_lon; ++i) std::fill(o + (row0 + i) * ld_o + hd.cout, o + (row0 + i + 1) * ld_o, 0.0f);
  }
}

}  // namespace surrogate::sphere::detail
