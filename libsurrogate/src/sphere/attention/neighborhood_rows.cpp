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

#include "workspace.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::sphere::detail {

using kernels::AlignedBuffer;
using kernels::index_t;

namespace {

constexpr int kLonBlock = 64;  // output longitudes per task (the kernel takes its SIMD width at a time)
constexpr int kBandPoints = 1024;  // output points (whole latitude rows, at least one) projected and attended at a time

/// Ring layout of one operand: channel e of (sample b, head h, input row lat, residue r) at ring position
/// j is at (((b*heads + h)*rows + lat)*p + r)*width + e) * ld_ring + j; positions ring .. ld_ring - 1
/// repeat positions 0 .. (mod ring).
struct RingLayout {
  int heads, width, rows, rows_in, nlon_in, ring, p;  // rows: slots for input rows (of rows_in)
  index_t ld_ring;
  index_t head_size() const { return static_cast<index_t>(rows) * p * width * ld_ring; }
  index_t size() const { return heads * head_size(); }

  /// Rows [r0, r0 + n) of the projected operand (row b*rows_in*nlon_in + lat*nlon_in + w, head h in
  /// columns [h*width, (h+1)*width), ld ld_src) into their ring positions (input row lat in slot lat mod
  /// rows; the samples one after the other in the same slots). Run by run of one (sample, input row,
  /// residue), head by head, through the kernels' tiled transposition (kernels::CpuKernels::transpose):
  /// whole vectors of consecutive ring positions per store rather than one cache line per value.
  void scatter(const kernels::CpuKernels& kern, index_t r0, index_t n, const float* src, index_t ld_src, float* dst) const {
    const index_t points = static_cast<index_t>(rows_in) * nlon_in;
    for (index_t i0 = 0; i0 < n;) {
      // Rows i0 .. i1 - 1: one sample and input row, longitudes w0 .. w0 + (i1 - i0) - 1.
      const index_t row0 = r0 + i0, slot = (row0 % points) / nlon_in % rows, w0 = row0 % nlon_in;
      const index_t i1 = std::min(n, i0 + (nlon_in - w0));
      for (index_t r = 0; r < p; ++r) {
        // The longitudes w = r (mod p) of the run: ring positions ja .. jb - 1, source rows wa - w0 + i0, + p, ...
        const index_t wa = w0 + ((r - w0 % p) % p + p) % p, w_end = w0 + (i1 - i0);
        if (wa >= w_end) continue;
        const index_t ja = wa / p, jb = ja + (w_end - wa + p - 1) / p;
        const float* s0 = src + (i0 + wa - w0) * ld_src;
        const index_t step = static_cast<index_t>(p) * ld_src;
        float* d0 = dst + (slot * p + r) * width * ld_ring;
        for (int h = 0; h < heads; ++h) {
          // Positions ja .. jb - 1 of the head's channels (the kernel's register-tiled transposition).
          kernels::TransposeArgs t;
          t.s = s0 + static_cast<index_t>(h) * width;
          t.lds = step;
          t.d = d0 + h * head_size() + ja;
          t.ldd = ld_ring;
          t.rows = jb - ja;
          t.cols = width;
          kern.transpose(t);
          // The wrapped copies ring .. ld_ring - 1 of positions 0 .. (mod ring).
          for (int e = 0; e < width; ++e) {
            float* d = d0 + h * head_size() + e * ld_ring;
            for (index_t shift = ring; ja + shift < ld_ring; shift += ring)
              for (index_t j = ja; j < std::min(jb, ld_ring - shift); ++j) d[j + shift] = d[j];
          }
        }
      }
      i0 = i1;
    }
  }
};

}  // namespace

void neighborhood_attention_rows(const NeighborhoodCsr& csr, const std::vector<float>& quad_w, const S2Heads& hd,
                                 int batch, int lat_begin, int lat_end, int in_begin, int in_end, const float* query,
                                 const float* key, const float* value, float* out, S2Workspace& ws) {
  const kernels::CpuKernels& kern = kernels::cpu();
  const int nlon_in = csr.nlon_in, ring = csr.nlon_out, p = nlon_in / ring;
  const int H = hd.heads, ek = hd.ek, ev = hd.ev, rows_in = in_end - in_begin, rows_out = lat_end - lat_begin;
  const index_t ld_ring = kernels::round_up(ring + kernels::kRingPad, kernels::kPad);
  const index_t po = static_cast<index_t>(rows_out) * ring, pi = static_cast<index_t>(rows_in) * nlon_in;

  const index_t ld_k = kernels::round_up(hd.ck, kernels::kPad), ld_v = hd.ld_out(), ld_o = ld_v;
  const int cin = hd.in_channels();
  const index_t lon_blocks = (ring + kLonBlock - 1) / kLonBlock;
  const int band = std::max(1, kBandPoints / ring);

  // The input rows each output row reaches, relative to in_begin: [first_in, last_in).
  const index_t first = csr.row_offsets[static_cast<std::size_t>(lat_begin)],
                count = csr.row_offsets[static_cast<std::size_t>(lat_end)] - first;
  std::vector<int> first_in(static_cast<std::size_t>(rows_out), rows_in), last_in(static_cast<std::size_t>(rows_out), 0);
  for (int t = 0; t < rows_out; ++t)
    for (index_t n = csr.row_offsets[static_cast<std::size_t>(lat_begin + t)] - first;
         n < csr.row_offsets[static_cast<std::size_t>(lat_begin + t) + 1] - first; ++n) {
      const int lat = static_cast<int>(csr.columns[static_cast<std::size_t>(first + n)] / nlon_in) - in_begin;
      first_in[static_cast<std::size_t>(t)] = std::min(first_in[static_cast<std::size_t>(t)], lat);
      last_in[static_cast<std::size_t>(t)] = std::max(last_in[static_cast<std::size_t>(t)], lat + 1);
    }
  // The bands below project the input rows in order, band k those from max(the rows projected, start[k])
  // up to reach[k], the highest row it reaches (start[k]: the lowest row that band k or a later one
  // reaches). The rings have `slots` slots for input rows, row lat in slot lat mod slots: they hold the
  // last `slots` rows projected, which include every row of band k when slots >= reach[k] - start[k]
  // (and the rows projected at once take distinct slots).
  const int bands = (rows_out + band - 1) / band;
  std::vector<int> reach(static_cast<std::size_t>(bands)), start(static_cast<std::size_t>(bands));
  for (int k = 0, highest = 0; k < bands; ++k) {
    for (int t = k * band; t < std::min(rows_out, (k + 1) * band); ++t)
      highest = std::max(highest, last_in[static_cast<std::size_t>(t)]);
    reach[static_cast<std::size_t>(k)] = highest;
  }
  int slots = 1;
  for (int k = bands - 1, lowest = rows_in; k >= 0; --k) {
    for (int t = k * band; t < std::min(rows_out, (k + 1) * band); ++t)
      lowest = std::min(lowest, first_in[static_cast<std::size_t>(t)]);
    start[static_cast<std::size_t>(k)] = std::min(lowest, reach[static_cast<std::size_t>(k)]);
    slots = std::max(slots, reach[static_cast<std::size_t>(k)] - start[static_cast<std::size_t>(k)]);
  }

  // The rings (in the operator's workspace, reused across forwards: no page faults; the threads get
  // pointers).
  const RingLayout k_layout{H, ek, slots, rows_in, nlon_in, ring, p, ld_ring},
      v_layout{H, ev, slots, rows_in, nlon_in, ring, p, ld_ring};
  const index_t ring_k = k_layout.head_size(), ring_v = v_layout.head_size();
  const PlainOperands& ops = ws.plain;
  AlignedBuffer<float>& k_rings = ws.k_rings;
  AlignedBuffer<float>& v_rings = ws.v_rings;
  k_rings.resize(static_cast<std::size_t>(k_layout.size()));
  v_rings.resize(static_cast<std::size_t>(v_layout.size()));
  float* const kt = k_rings.data();
  float* const vt = v_rings.data();

  // The entries of the band's lists: ring row offsets (within one head), positions, weights.
  std::vector<index_t> key_base(static_cast<std::size_t>(count)), value_base(static_cast<std::size_t>(count));
  std::vector<std::int32_t> ring_pos(static_cast<std::size_t>(count));
  std::vector<float> weight(static_cast<std::size_t>(count));
  for (index_t n = 0; n < count; ++n) {
    const std::int64_t col = csr.columns[static_cast<std::size_t>(first + n)];
    const index_t lat = col / nlon_in, w = col % nlon_in, row = (lat - in_begin) % slots * p + w % p;
    key_base[static_cast<std::size_t>(n)] = row * ek * ld_ring;
    value_base[static_cast<std::size_t>(n)] = row * ev * ld_ring;
    ring_pos[static_cast<std::size_t>(n)] = static_cast<std::int32_t>(w / p);
    weight[static_cast<std::size_t>(n)] = quad_w[static_cast<std::size_t>(lat)];
  }

  // Sample by sample, band by band (about kBandPoints output points, whole rows): the projections of the
  // band's queries and of the input rows it reaches that are not projected yet (the keys and values into
  // their rings block by block while in cache), then the band's softmax while those rows are still in
  // cache, then its output projection.
  AlignedBuffer<float>& o_band = ws.attention;  // the band's attention results, head h in columns [h*ev, (h+1)*ev)
  o_band.resize(static_cast<std::size_t>(std::min(band, rows_out) * ring * ld_o));
  float* const o = o_band.data();
  for (int b = 0; b < batch; ++b) {
    int projected = 0;  // input rows [0, projected) of sample b are done with
    for (int bi = 0; bi < bands; ++bi) {
      const int t0 = bi * band, t1 = std::min(rows_out, t0 + band);
      const int from = std::max(projected, start[static_cast<std::size_t>(bi)]), to = reach[static_cast<std::size_t>(bi)];
      const index_t q_row0 = b * po + static_cast<index_t>(t0) * ring, k_row0 = b * pi + static_cast<index_t>(from) * nlon_in;
      const S2Heads::KeyValueSink to_rings = [&](index_t r0, index_t n, const float* k, const float* v) {
        k_layout.scatter(kern, k_row0 + r0, n, k, ld_k, kt);
        v_layout.scatter(kern, k_row0 + r0, n, v, ld_v, vt);
      };
      hd.project_plain(static_cast<index_t>(t1 - t0) * ring, static_cast<index_t>(to - from) * nlon_in,
                       query + q_row0 * cin, key + k_row0 * cin, value + k_row0 * cin, ws, &to_rings);
      projected = to;
      const float* const q = ops.q.data();

      // One task per (head, output row, block of output longitudes), heads outermost: one head's rings of
      // the rows in reach stay in L2.
      const index_t band_rows = t1 - t0, tasks = static_cast<index_t>(H) * band_rows * lon_blocks;
#pragma omp parallel for schedule(dynamic)
      for (index_t task = 0; task < tasks; ++task) {
        const int h = static_cast<int>(task / (band_rows * lon_blocks));
        const index_t lat = t0 + (task / lon_blocks) % band_rows;
        const int wo0 = static_cast<int>((task % lon_blocks) * kLonBlock);
        const int n_lon = std::min(ring - wo0, kLonBlock);
        const index_t beg = csr.row_offsets[static_cast<std::size_t>(lat_begin + lat)] - first;
        const index_t row0 = (lat - t0) * ring + wo0;
        kernels::RingAttentionArgs a;
        a.ek = ek;
        a.ev = ev;
        a.q = q + row0 * ld_k + static_cast<index_t>(h) * ek;
        a.ldq = ld_k;
        a.count = n_lon;
        a.first = wo0;
        a.ring = ring;
        a.kt = kt + h * ring_k;
        a.vt = vt + h * ring_v;
        a.ld_ring = ld_ring;
        a.entries = csr.row_offsets[static_cast<std::size_t>(lat_begin + lat) + 1] - first - beg;
        a.key_base = key_base.data() + beg;
        a.value_base = value_base.data() + beg;
        a.ring_pos = ring_pos.data() + beg;
        a.weight = weight.data() + beg;
        a.out = o + row0 * ld_o + static_cast<index_t>(h) * ev;
        a.ldo = ld_o;
        kern.ring_attention(a);
        if (h == H - 1)
          for (int i = 0; i < n_lon; ++i) std::fill(o + (row0 + i) * ld_o + hd.cout, o + (row0 + i + 1) * ld_o, 0.0f);
      }
      hd.output_projection(band_rows * ring, o, out + (b * po + static_cast<index_t>(t0) * ring) * hd.cout, ws);
    }
  }
}

}  // namespace surrogate::sphere::detail
