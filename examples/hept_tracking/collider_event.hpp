// A synthetic collider event for the HEPT tracking checkpoint (README.md, "The event"): helices from the
// interaction region in a 2 T solenoid through the TrackML pixel detector, noise hits, and the 15
// features and 6 coordinates of every hit built as the tracking data set builds them
// (../shared/docs/reference-models.md §4.2; the same recipe as share/tools/golden/hept_golden.py).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <vector>

namespace hept_tracking {

/// Uniform, normal and exponential numbers from the fully specified mt19937_64 by explicit formulas, so
/// that an event is the same with every standard library.
class Random {
 public:
  explicit Random(std::uint64_t seed) : engine_(seed) {}
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double a, double b) { return a + (b - a) * uniform(); }
  double exponential(double mean) { return -mean * std::log1p(-uniform()); }
  double normal() {  // Box-Muller, one value per call
    const double u = 1.0 - uniform(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * v);
  }
  int below(int n) { return static_cast<int>(uniform() * n); }

 private:
  std::mt19937_64 engine_;
};

/// TrackML pixel detector (mm): 4 barrel layers, 7 disks on each side; pixel pitch and sensor thickness.
struct Detector {
  static constexpr std::array<double, 4> barrel_r{32.0, 72.0, 116.0, 172.0};
  static constexpr double barrel_half_z = 491.0;
  static constexpr std::array<double, 7> disk_z{600.0, 700.0, 820.0, 960.0, 1100.0, 1300.0, 1500.0};
  static constexpr double disk_r_min = 30.0, disk_r_max = 175.0;
  static constexpr double pitch_u = 0.05, pitch_v = 0.05625, thickness = 0.15;
  /// Barrel modules: per layer `barrel_modules` flat modules around φ, the first centred at
  /// `barrel_first_phi` (degrees), each normal turned by `barrel_tilt` (degrees) from the radial direction.
  static constexpr std::array<int, 4> barrel_modules{16, 32, 52, 78};
  static constexpr std::array<double, 4> barrel_first_phi{-168.75, -174.375, -176.538, -177.692};
  static constexpr double barrel_tilt = 8.02;
  /// Azimuth of the normal of the barrel module of layer k that holds azimuth φ (radians).
  static double barrel_normal(int k, double phi) {
    const auto K = static_cast<std::size_t>(k);
    const double step = 2.0 * std::numbers::pi / barrel_modules[K],
                 first = barrel_first_phi[K] * std::numbers::pi / 180.0;
    return first + step * std::round((phi - first) / step) + barrel_tilt * std::numbers::pi / 180.0;
  }
  /// Layer index of the data set: the sorted (volume, layer) pairs, (7, 2..14) → 0..6 (z = −1500 … −600),
  /// (8, 2..8) → 7..10 (barrel), (9, 2..14) → 11..17 (z = +600 … +1500).
  static int barrel_layer(int k) { return 7 + k; }
  static int disk_layer(int k, double side) { return side < 0 ? 6 - k : 11 + k; }
};

/// The generator's choices.
struct EventSettings {
  double field_tesla = 2.0;
  double pt_min = 0.4, pt_mean_above_min = 1.0;  // pT = pt_min + Exp(pt_mean_above_min) GeV
  double eta_max = 3.5;                          // η uniform in [−eta_max, eta_max]
  double z0_sigma = 55.0;                        // mm, beam spot length
  double smearing = 0.02;                        // mm, per coordinate
  double noise_fraction = 0.1;
};

/// One hit: what the model sees (float32, as the data set stores it) and the truth.
struct Hit {
  std::array<float, 15> x{};      // 14 scaled features, layer / 10
  std::array<float, 6> coords{};  // η, φ, r/1000, φ/π, z/1000, η_rz
  std::array<double, 3> position{};
  std::int64_t particle = 0;  // 0: noise
  double pt = 0.0;            // GeV (0 for noise)
  int layer = 0;
};

namespace detail {

struct RawHit {
  std::array<double, 3> position, direction;
  int layer;
  bool barrel;
};

/// Features and coordinates of a hit as point_cloud_builder.py and tracking.py compute them: positions
/// float32, r, φ, η_rz, u, v in float32 arithmetic; the cluster shape from the crossing angle (module
/// axes below).
inline Hit features(const RawHit& raw, Random& random) {
  using D = Detector;
  const float hx = static_cast<float>(raw.position[0]), hy = static_cast<float>(raw.position[1]),
              hz = static_cast<float>(raw.position[2]);
  const float r = std::sqrt(hx * hx + hy * hy), phi = std::atan2(hy, hx);
  const float eta_rz = -std::log(std::tan(std::atan2(r, hz) / 2.0f));
  const float u = hx / (hx * hx + hy * hy), v = hy / (hx * hx + hy * hy);
  const double ph = std::atan2(raw.position[1], raw.position[0]);
  // Module axes of detector_kaggle.csv: barrel u = e_φ, v = e_z, w = e_r of the module's normal azimuth;
  // disks at z > 0 u = −e_φ, v = e_r, w = e_z; disks at z < 0 u = e_φ, v = e_r, w = −e_z.
  const double normal = raw.barrel ? D::barrel_normal(raw.layer - D::barrel_layer(0), ph) : ph;
  const double flip = !raw.barrel && raw.position[2] > 0 ? -1.0 : 1.0,
               w_z = !raw.barrel && raw.position[2] < 0 ? -1.0 : 1.0;
  const std::array<double, 3> u_hat{-flip * std::sin(normal), flip * std::cos(normal), 0.0},
      e_r{std::cos(normal), std::sin(normal), 0.0}, e_z{0.0, 0.0, w_z};
  const auto& w_hat = raw.barrel ? e_r : e_z;
  const auto& v_hat = raw.barrel ? e_z : e_r;
  const auto dot = [&](const std::array<double, 3>& a) {
    return a[0] * raw.direction[0] + a[1] * raw.direction[1] + a[2] * raw.direction[2];
  };
  const double du = dot(u_hat), dv = dot(v_hat), dw = std::max(std::abs(dot(w_hat)), 0.05);
  const double nb_u =
      std::min(1.0 + std::floor(D::thickness * std::abs(du) / dw / D::pitch_u + random.uniform()), 30.0);
  const double nb_v =
      std::min(1.0 + std::floor(D::thickness * std::abs(dv) / dw / D::pitch_v + random.uniform()), 30.0);
  const double l_u = nb_u * D::pitch_u, l_v = nb_v * D::pitch_v, l_w = 2.0 * D::thickness;
  const double charge_frac = random.uniform(0.1, 0.45);
  const auto spherical = [](double a, double b, double c) {  // θ, φ of a vector
    return std::array<double, 2>{std::acos(c / std::sqrt(a * a + b * b + c * c)), std::atan2(b, a)};
  };
  const auto local = spherical(l_u, l_v, l_w);
  std::array<double, 3> g{};
  for (int d = 0; d < 3; ++d) {
    const auto k = static_cast<std::size_t>(d);
    g[k] = l_u * u_hat[k] + l_v * v_hat[k] + l_w * w_hat[k];
  }
  const auto global = spherical(g[0], g[1], g[2]);
  const auto eta_of = [](double theta) { return -std::log(std::tan(0.5 * theta)); };
  // The 14 features (float32, as to_pyg_data stores them), divided by the data set's scale in float64.
  const std::array<float, 14> raw14{r,
                                    phi,
                                    hz,
                                    eta_rz,
                                    u,
                                    v,
                                    static_cast<float>(charge_frac),
                                    static_cast<float>(eta_of(local[0])),
                                    static_cast<float>(local[1]),
                                    static_cast<float>(l_u),
                                    static_cast<float>(l_v),
                                    static_cast<float>(l_w),
                                    static_cast<float>(eta_of(global[0])),
                                    static_cast<float>(global[1])};
  const std::array<double, 6> scale{1000.0, std::numbers::pi, 1000.0, 1.0, 1.0 / 1000.0, 1.0 / 1000.0};
  Hit hit;
  for (std::size_t i = 0; i < 14; ++i)
    hit.x[i] = static_cast<float>(static_cast<double>(raw14[i]) / (i < 6 ? scale[i] : 1.0));
  hit.x[14] = static_cast<float>(raw.layer) / 10.0f;
  // coords = [η, φ] (η from the unscaled r, z in float32, calc_eta of tracking.py), then x[:, :4].
  hit.coords = {-1.0f * std::log(std::tan(std::atan2(r, hz) / 2.0f)), phi, hit.x[0], hit.x[1], hit.x[2], hit.x[3]};
  hit.position = raw.position;
  hit.layer = raw.layer;
  return hit;
}

}  // namespace detail

/// The hits of φ wedge `wedge` of `wedges` (particles whose initial direction lies in the wedge, plus noise
/// hits in it): about `track_hits` hits of particles (whole particles: the last one may overshoot) and
/// `noise_hits` noise hits. Particle ids are wedge · 10⁶ + 1, 2, …. The same for a given (seed, wedge)
/// whichever rank generates it.
inline std::vector<Hit> generate_wedge(const EventSettings& s, std::uint64_t seed, int wedge, int wedges,
                                       std::int64_t track_hits, std::int64_t noise_hits) {
  using D = Detector;
  constexpr double pi = std::numbers::pi;
  Random random(seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(wedge) + 1);
  const double phi_lo = -pi + 2.0 * pi * wedge / wedges, phi_hi = -pi + 2.0 * pi * (wedge + 1) / wedges;
  std::vector<Hit> hits;
  std::vector<detail::RawHit> crossings;
  for (std::int64_t particle = 1; static_cast<std::int64_t>(hits.size()) < track_hits; ++particle) {
    const double pt = s.pt_min + random.exponential(s.pt_mean_above_min);
    const double eta = random.uniform(-s.eta_max, s.eta_max), phi0 = random.uniform(phi_lo, phi_hi);
    const double q = random.uniform() < 0.5 ? -1.0 : 1.0, z0 = s.z0_sigma * random.normal();
    const double radius = 1000.0 * pt / (0.3 * s.field_tesla), cot = std::sinh(eta);  // mm
    // Position and unit direction after the transverse path length t.
    const auto point = [&](double t, int layer, bool barrel) {
      const double a = phi0 - q * t / radius;
      std::array<double, 3> d{std::cos(a), std::sin(a), cot};
      const double norm = std::sqrt(1.0 + cot * cot);
      for (double& c : d) c /= norm;
      return detail::RawHit{
          {(radius / q) * (std::sin(phi0) - std::sin(a)), (radius / q) * (std::cos(a) - std::cos(phi0)), z0 + t * cot},
          d,
          layer,
          barrel};
    };
    crossings.clear();
    for (std::size_t k = 0; k < D::barrel_r.size() && D::barrel_r[k] < 2.0 * radius; ++k) {
      const detail::RawHit h =
          point(2.0 * radius * std::asin(D::barrel_r[k] / (2.0 * radius)), D::barrel_layer(static_cast<int>(k)), true);
      if (std::abs(h.position[2]) < D::barrel_half_z) crossings.push_back(h);
    }
    const double side = cot > 0 ? 1.0 : -1.0;
    for (std::size_t k = 0; k < D::disk_z.size() && std::abs(cot) > 1e-6; ++k) {
      const double t = (side * D::disk_z[k] - z0) / cot;
      if (t <= 0 || t / radius >= pi) continue;
      const detail::RawHit h = point(t, D::disk_layer(static_cast<int>(k), side), false);
      const double rr = std::hypot(h.position[0], h.position[1]);
      if (rr > D::disk_r_min && rr < D::disk_r_max) crossings.push_back(h);
    }
    for (detail::RawHit raw : crossings) {
      for (double& c : raw.position) c += s.smearing * random.normal();
      Hit hit = detail::features(raw, random);
      hit.particle = static_cast<std::int64_t>(wedge) * 1000000 + particle;
      hit.pt = pt;
      hits.push_back(hit);
    }
  }
  for (std::int64_t i = 0; i < noise_hits; ++i) {
    const double a = random.uniform(phi_lo, phi_hi);
    detail::RawHit raw{};
    if (random.uniform() < 0.5) {
      const int k = random.below(4);
      const double r = D::barrel_r[static_cast<std::size_t>(k)];
      raw = {{r * std::cos(a), r * std::sin(a), random.uniform(-D::barrel_half_z, D::barrel_half_z)},
             {std::cos(a), std::sin(a), 0.0},
             D::barrel_layer(k),
             true};
    } else {
      const int k = random.below(7);
      const double side = random.uniform() < 0.5 ? -1.0 : 1.0;
      const double rr = std::sqrt(random.uniform(D::disk_r_min * D::disk_r_min, D::disk_r_max * D::disk_r_max));
      raw = {{rr * std::cos(a), rr * std::sin(a), side * D::disk_z[static_cast<std::size_t>(k)]},
             {0.3 * std::cos(a), 0.3 * std::sin(a), side},
             D::disk_layer(k, side),
             false};
    }
    for (double& c : raw.position) c += s.smearing * random.normal();
    hits.push_back(detail::features(raw, random));
  }
  return hits;
}

}  // namespace hept_tracking
