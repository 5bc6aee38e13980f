// NeighborhoodAttentionS2's forward in the upsampling (scatter) mode (query grid finer than the key
// grid): per sample, the keys and values of the input rows projected once (S2Heads::project_plain) and
// transposed into channel-major rings over the input longitudes;
// then band by band of output rows the q projection, the softmax of every output point over its input
// neighbours on the shared ring-attention kernel (the queries of one output latitude and longitude
// residue r, output longitudes r, r + p, r + 2p, ..., as consecutive lanes: they read consecutive ring
// positions of each neighbour entry), and the output projection. No output x input scratch: the rings
// hold the input rows of one sample, the q and attention buffers one band.
#include <algorithm>
#include <vector>

#include "neighborhood_upsample.hpp"
#include "workspace.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::sphere::detail {

using kernels::AlignedBuffer;
using kernels::index_t;

namespace {

constexpr int kLonBlock = 64;      // output longitudes of one residue class per task
constexpr int kBandPoints = 1024;  // output points (whole latitude rows, at least one) per band

/// Projected rows [r0, r0 + n) of one sample's input rows (row = slot * nlon + w, head h in columns [h*width,
/// (h+1)*width), ld ld_src) into the rings: channel e of (head h, slot, position w) at ((h*slots + slot)*width
/// + e)*ld_ring + w; positions nlon .. ld_ring - 1 repeat positions 0 .. (mod nlon). Run by run of one input
/// row, through the kernels' block transposition.
void to_rings(index_t r0, index_t n, const float* src, index_t ld_src, int heads, int width, int slots, int nlon,
              index_t ld_ring, float* dst) {
  const kernels::CpuKernels& kern = kernels::cpu();
  for (index_t i0 = 0; i0 < n;) {
    const index_t row = r0 + i0, slot = row / nlon, w0 = row % nlon, len = std::min(n - i0, nlon - w0);
    for (int h = 0; h < heads; ++h) {
      float* d = dst + (static_cast<index_t>(h) * slots + slot) * width * ld_ring;
      kernels::TransposeArgs a;
      a.s = src + i0 * ld_src + static_cast<index_t>(h) * width;
      a.lds = ld_src;
      a.d = d + w0;
      a.ldd = ld_ring;
      a.rows = len;
      a.cols = width;
      kern.transpose(a);
      // The wrapped copies of the run's positions.
      for (int e = 0; e < width; ++e)
        for (index_t w = w0; w < w0 + len; ++w)
          for (index_t pos = w + nlon; pos < ld_ring; pos += nlon) d[e * ld_ring + pos] = d[e * ld_ring + w];
    }
    i0 += len;
  }
}

}  // namespace

void upsample_attention_rows(const UpsampleLists& l, const std::vector<float>& quad_w, const S2Heads& hd, int batch,
                             int lat_begin, int lat_end, int in_begin, int in_end, const float* query, const float* key,
                             const float* value, float* out, S2Workspace& ws) {
  const kernels::CpuKernels& kern = kernels::cpu();
  const int nlon_in = l.nlon_in, nlon_out = l.nlon_out, p = l.p;
  const int H = hd.heads, ek = hd.ek, ev = hd.ev, rows_out = lat_end - lat_begin;
  const int cin = hd.in_channels();
  const index_t ld_ring = kernels::round_up(nlon_in + kernels::kRingPad, kernels::kPad);
  // Only the input rows [lo, hi) that the output rows reach are projected (within the given [in_begin, in_end)).
  const std::pair<int, int> reach = upsample_input_rows(l, lat_begin, lat_end);
  const int lo = reach.first < reach.second ? reach.first : in_begin, rows_in = reach.second - reach.first;
  const index_t po = static_cast<index_t>(rows_out) * nlon_out, pi = static_cast<index_t>(in_end - in_begin) * nlon_in;
  const index_t skip = static_cast<index_t>(lo - in_begin) * nlon_in;  // rows of a sample's key before row lo
  const index_t ld_k = kernels::round_up(hd.ck, kernels::kPad), ld_o = hd.ld_out();
  const index_t m_blocks = (nlon_in + kLonBlock - 1) / kLonBlock;
  const int band = std::max(1, kBandPoints / nlon_out);

  // The entries of the classes of rows [lat_begin, lat_end): ring offsets (within one head), positions,
  // weights.
  const index_t first = l.offsets[static_cast<std::size_t>(lat_begin) * static_cast<std::size_t>(p)],
                count = l.offsets[static_cast<std::size_t>(lat_end) * static_cast<std::size_t>(p)] - first;
  std::vector<index_t> key_base(static_cast<std::size_t>(count)), value_base(static_cast<std::size_t>(count));
  std::vector<std::int32_t> ring_pos(static_cast<std::size_t>(count));
  std::vector<float> weight(static_cast<std::size_t>(count));
  for (index_t n = 0; n < count; ++n) {
    const auto j = static_cast<std::size_t>(first + n);
    const index_t slot = l.row[j] - lo;
    key_base[static_cast<std::size_t>(n)] = slot * ek * ld_ring;
    value_base[static_cast<std::size_t>(n)] = slot * ev * ld_ring;
    ring_pos[static_cast<std::size_t>(n)] = l.lon0[j];
    weight[static_cast<std::size_t>(n)] = quad_w[static_cast<std::size_t>(l.row[j])];
  }

  // Buffers of the operator's workspace, reused across forwards (the worker threads get pointers).
  const index_t ring_k = static_cast<index_t>(rows_in) * ek * ld_ring, ring_v = static_cast<index_t>(rows_in) * ev * ld_ring;
  const PlainOperands& ops = ws.plain;
  AlignedBuffer<float>& k_rings = ws.k_rings;
  AlignedBuffer<float>& v_rings = ws.v_rings;
  AlignedBuffer<float>& o_band = ws.attention;  // one band's attention results, head h in columns [h*ev, (h+1)*ev)
  k_rings.resize(static_cast<std::size_t>(H * ring_k));
  v_rings.resize(static_cast<std::size_t>(H * ring_v));
  o_band.resize(static_cast<std::size_t>(std::min(band, rows_out) * nlon_out * ld_o));
  float* const kt = k_rings.data();
  float* const vt = v_rings.data();
  float* const o = o_band.data();

  for (int b = 0; b < batch; ++b) {
    // The sample's keys and values into the rings, block by block as the projection makes them.
    const float* const k_rows = key + (b * pi + skip) * cin;
    const float* const v_rows = value + (b * pi + skip) * cin;
    const S2Heads::KeyValueSink sink = [&](index_t r0, index_t n, const float* k, const float* v) {
      to_rings(r0, n, k, ld_k, H, ek, rows_in, nlon_in, ld_ring, kt);
      to_rings(r0, n, v, ld_o, H, ev, rows_in, nlon_in, ld_ring, vt);
    };
    hd.project_plain(0, static_cast<index_t>(rows_in) * nlon_in, nullptr, k_rows, v_rows, ws, &sink);

    for (int t0 = 0; t0 < rows_out; t0 += band) {
      const int t1 = std::min(rows_out, t0 + band);
      const index_t band_rows = t1 - t0, q_row0 = b * po + static_cast<index_t>(t0) * nlon_out;
      const float* const xq = query + q_row0 * cin;
      hd.project_plain(band_rows * nlon_out, 0, xq, xq, xq, ws, nullptr);
      const float* const q = ops.q.data();
      // Padding columns of the attention results (read by the output projection) finite.
      for (index_t r = 0; r < band_rows * nlon_out; ++r) std::fill(o + r * ld_o + hd.cout, o + (r + 1) * ld_o, 0.0f);

      // One task per (head, output row, residue, block of m), heads outermost.
      const index_t tasks = static_cast<index_t>(H) * band_rows * p * m_blocks;
#pragma omp parallel for schedule(dynamic)
      for (index_t task = 0; task < tasks; ++task) {
        const int h = static_cast<int>(task / (band_rows * p * m_blocks));
        const index_t t = t0 + (task / (p * m_blocks)) % band_rows;
        const int r = static_cast<int>((task / m_blocks) % p);
        const int m0 = static_cast<int>((task % m_blocks) * kLonBlock);
        const std::size_t cls = static_cast<std::size_t>(lat_begin + t) * static_cast<std::size_t>(p) +
                                static_cast<std::size_t>(r);
        const index_t beg = l.offsets[cls] - first, end = l.offsets[cls + 1] - first;
        const index_t row0 = (t - t0) * nlon_out + r + static_cast<index_t>(p) * m0;  // within the band
        kernels::RingAttentionArgs a;
        a.ek = ek;
        a.ev = ev;
        a.q = q + row0 * ld_k + static_cast<index_t>(h) * ek;
        a.ldq = p * ld_k;
        a.count = std::min(nlon_in - m0, kLonBlock);
        a.first = m0;
        a.ring = nlon_in;
        a.kt = kt + h * ring_k;
        a.vt = vt + h * ring_v;
        a.ld_ring = ld_ring;
        a.entries = end - beg;
        a.key_base = key_base.data() + beg;
        a.value_base = value_base.data() + beg;
        a.ring_pos = ring_pos.data() + beg;
        a.weight = weight.data() + beg;
        a.out = o + row0 * ld_o + static_cast<index_t>(h) * ev;
        a.ldo = p * ld_o;
        kern.ring_attention(a);
      }
      hd.output_projection(band_rows * nlon_out, o, out + q_row0 * hd.cout, ws);
    }
  }
}

}  // namespace surrogate::sphere::detail
