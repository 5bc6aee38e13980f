// The filter tensor psi of DiscreteContinuousConvS2 (torch-harmonics 0.9.3 semantics; docs/reference-
// models.md §5.6, share/docs/sphere.md "DISCO convolution"). Every step follows the official float64
// arithmetic operation by operation (compiled without fused multiply-add) so that points near the
// support boundaries fall on the same side and the values agree to a few ulps:
//  1. for each output latitude t (output longitude 0), the candidate input latitudes |theta_in -
//     theta_out| <= rc, rc = (1 + 1e-3) theta_cutoff; each input point rotated into the frame of the
//     output point (YZY Euler angles), normalised, r = arccos(z), phi = atan2(y, x) in [0, 2 pi);
//  2. the basis functions k evaluated on the support, entries ordered (t, k, hi, wi);
//  3. the basis normalisation per (k, t) group with the quadrature weights q = w_hi / nlon_in / 2;
//  4. the values multiplied by q (merge_quadrature);
//  5. a stable sort by k (the official preprocess_psi), giving the order (k, t, hi, wi).
// DiscreteContinuousConvTransposeS2 builds the same table with the grids' roles swapped (rows = its input
// latitudes, the basis evaluated on its output grid), groups (k, output latitude) in step 3 with the
// weight of the row's (input) latitude, and divides the merged values by nlon_in / nlon_out. The bases
// include "fourier-bessel" (Bessel functions std::cyl_bessel_j, zeros from bessel_j_zeros).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "surrogate/error.hpp"
#include "surrogate/sphere/disco.hpp"
#include "surrogate/sphere/neighborhood.hpp"

namespace surrogate::sphere {

namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::invalid_argument, message); }

constexpr double kPi = std::numbers::pi;
constexpr double kNormEps = 1e-9;  // the clamp of the official normalisation

std::string shape_string(const std::vector<int>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

void check_shape(FilterBasis basis, const std::vector<int>& shape) {
  if (shape.empty() || shape.size() > 2)
    invalid("kernel_shape must have 1 or 2 entries, got " + std::to_string(shape.size()));
  // fourier-bessel: (n_radial, m_max), m_max = 0 (only J_0) allowed
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (shape[i] < (basis == FilterBasis::fourier_bessel && i == 1 ? 0 : 1))
      invalid("kernel_shape entries must be positive, got " + shape_string(shape));
}

/// One Fourier-Bessel basis function J_m(alpha r / rc) {cos, sin}(m phi) / norm.
struct BesselMode {
  double alpha = 0.0;
  int m = 0;
  bool cosine = true;
};

/// The official selection and order: n_radial = shape[0], m_max = shape[1] (one entry: both); alpha_max is
/// the n_radial-th zero of J_0; for m = 0 .. m_max the first n_radial zeros of J_m not above alpha_max,
/// a cosine and (m > 0) a sine function each; stably sorted by alpha (the eigenvalue order).
std::vector<BesselMode> fourier_bessel_modes(const std::vector<int>& shape) {
  const int nrad = shape[0], mmax = shape.size() == 2 ? shape[1] : shape[0];
  const double alpha_max = bessel_j_zeros(0, nrad).back();
  std::vector<BesselMode> modes;
  for (int m = 0; m <= mmax; ++m)
    for (double a : bessel_j_zeros(m, nrad)) {
      if (a > alpha_max) break;
      modes.push_back({a, m, true});
      if (m > 0) modes.push_back({a, m, false});
    }
  std::stable_sort(modes.begin(), modes.end(), [](const BesselMode& x, const BesselMode& y) { return x.alpha < y.alpha; });
  return modes;
}

/// min(|a - b|, |2 pi - |a - b||), as the official _circle_dist.
double circle_dist(double a, double b) {
  const double d = std::fabs(a - b);
  return std::min(d, std::fabs(2.0 * kPi - d));
}

/// One basis, evaluated pointwise: eval(k, r, phi, &value) says whether (r, phi) is in the support of
/// function k (the official argwhere condition) and gives its value before the basis normalisation.
class Basis {
 public:
  Basis(FilterBasis basis, const std::vector<int>& shape, double rc) : basis_(basis), rc_(rc) {
    check_shape(basis, shape);
    K_ = filter_basis_size(basis, shape);
    if (basis == FilterBasis::piecewise_linear) {
      nr_ = shape[0];
      nphi_ = shape.size() == 2 ? shape[1] : 1;
      dr_ = 2.0 * rc / (nr_ + 1);
      dphi_ = 2.0 * kPi / nphi_;
      ir_.resize(static_cast<std::size_t>(K_));
      iphi_.resize(static_cast<std::size_t>(K_));
      for (int k = 0; k < K_; ++k) {
        const auto i = static_cast<std::size_t>(k);
        if (nphi_ == 1) {
          ir_[i] = nr_ % 2 == 1 ? static_cast<double>(k) * dr_ : (static_cast<double>(k) + 0.5) * dr_;
        } else if (nr_ % 2 == 1) {
          // floor division and Python-style modulo of k - 1 (k = 0 gives ring 0, its angle is unused)
          const int km1 = k - 1;
          const int fdiv = km1 >= 0 ? km1 / nphi_ : -1;
          const int fmod = ((km1 % nphi_) + nphi_) % nphi_;
          ir_[i] = static_cast<double>(fdiv + 1) * dr_;
          iphi_[i] = static_cast<double>(fmod) * dphi_ - kPi;
        } else {
          ir_[i] = (static_cast<double>(k / nphi_) + 0.5) * dr_;
          iphi_[i] = static_cast<double>(k % nphi_) * dphi_ - kPi;
        }
      }
    } else if (basis == FilterBasis::harmonic || basis == FilterBasis::morlet) {
      n0_ = shape[0];
      n1_ = shape.size() == 2 ? shape[1] : shape[0];
      if (basis == FilterBasis::harmonic) l2_norms();
    } else if (basis == FilterBasis::fourier_bessel) {
      modes_ = fourier_bessel_modes(shape);
      // analytic L2 norms on the unit disk: |J_{m+1}(alpha)| / sqrt(2) times sqrt(2 pi) (m = 0) or sqrt(pi)
      for (const BesselMode& b : modes_) {
        const double radial = std::max(std::fabs(std::cyl_bessel_j(b.m + 1.0, b.alpha)) / std::sqrt(2.0), 1e-12);
        const double angular = b.m == 0 ? std::sqrt(2.0 * kPi) : std::sqrt(kPi);
        norms_.push_back(std::max(1.0 * radial * angular, 1e-12));
      }
    } else {  // zernike
      nmax_ = shape[0];
      zn_.resize(static_cast<std::size_t>(K_));
      zl_.resize(static_cast<std::size_t>(K_));
      for (int n = 0, k = 0; n < nmax_; ++n)
        for (int l = 0; l <= n; ++l, ++k) {
          zn_[static_cast<std::size_t>(k)] = n;
          zl_[static_cast<std::size_t>(k)] = l;
        }
      for (int x = 0; x <= nmax_ + 1; ++x)  // factorials as the official float32 exp(lgamma(x + 1))
        fact32_.push_back(std::exp(std::lgamma(static_cast<float>(x + 1))));
    }
  }

  int size() const { return K_; }

  bool eval(int k, double r, double phi, double& value) const {
    switch (basis_) {
      case FilterBasis::piecewise_linear: return piecewise(k, r, phi, value);
      case FilterBasis::harmonic:
      case FilterBasis::morlet:
        if (!(r <= rc_)) return false;
        value = harmonic(k, r / rc_, phi);
        if (!norms_.empty()) value = value / std::max(norms_[static_cast<std::size_t>(k)], 1e-12);
        return true;
      case FilterBasis::fourier_bessel: {
        if (!(r <= rc_)) return false;
        const BesselMode& b = modes_[static_cast<std::size_t>(k)];
        const double radial = std::cyl_bessel_j(static_cast<double>(b.m), b.alpha * (r / rc_));
        const double mphi = static_cast<double>(b.m) * phi;
        value = radial * (b.cosine ? std::cos(mphi) : std::sin(mphi)) / norms_[static_cast<std::size_t>(k)];
        return true;
      }
      default:
        if (!(r <= rc_)) return false;
        value = zernike(k, r / rc_, phi);
        return true;
    }
  }

 private:
  bool piecewise(int k, double r, double phi, double& value) const {
    const auto i = static_cast<std::size_t>(k);
    const double ir = ir_[i];
    if (nphi_ == 1) {
      const double d = std::fabs(r - ir);
      if (!(d <= dr_ && r <= rc_)) return false;
      value = 1.0 - d / dr_;
      return true;
    }
    if (nr_ % 2 == 1) {
      const double d = std::fabs(r - ir);
      if (!(d <= dr_ && r <= rc_)) return false;
      const double dp = circle_dist(phi, iphi_[i]);
      if (!(k == 0 || dp <= dphi_)) return false;
      value = 1.0 - d / dr_;
      value *= k > 0 ? (1.0 - dp / dphi_) : 1.0;
      return true;
    }
    // even nr: the inner ring also covers the mirrored point (-r, phi +- pi)
    const double rn = -r;
    const double phin = phi + kPi >= kPi ? phi - kPi : phi + kPi;
    const double d = std::fabs(r - ir), dn = std::fabs(rn - ir);
    const double dp = circle_dist(phi, iphi_[i]), dpn = circle_dist(phin, iphi_[i]);
    const bool cr = d <= dr_ && r <= rc_, cp = dp <= dphi_;
    const bool crn = dn <= dr_ && rn <= rc_, cpn = dpn <= dphi_;
    if (!((cr && cp) || (crn && cpn))) return false;
    double v = (cr ? 1.0 : 0.0) * (1.0 - d / dr_);
    v *= (cp ? 1.0 : 0.0) * (1.0 - dp / dphi_);
    double vn = (crn ? 1.0 : 0.0) * (1.0 - dn / dr_);
    vn *= (cpn ? 1.0 : 0.0) * (1.0 - dpn / dphi_);
    value = v + vn;
    return true;
  }

  /// Unnormalised harmonic function k at the normalised radius u = r / rc.
  double harmonic(int k, double u, double phi) const {
    const int n = k % n1_, m = k / n1_;
    const double x = u * std::sin(phi), y = u * std::cos(phi);
    const double fx = std::ceil(static_cast<double>(n) / 2), fy = std::ceil(static_cast<double>(m) / 2);
    const double ax = fx * kPi * x / 1.0, ay = fy * kPi * y / 1.0;
    double h = n % 2 == 1 ? std::sin(ax) : std::cos(ax);
    h *= m % 2 == 1 ? std::sin(ay) : std::cos(ay);
    const double c = std::cos(0.5 * kPi * u / 1.0);
    return c * c * h;
  }

  /// The official numerical L2 norms on the unit disk: midpoint rule with 50 radii x 200 angles.
  void l2_norms() {
    constexpr int nr = 50, nphi = 200;
    const double dphi = 2 * kPi / nphi, dr = 1.0 / nr;
    norms_.assign(static_cast<std::size_t>(K_), 0.0);
    for (int k = 0; k < K_; ++k) {
      double s = 0.0;
      for (int i = 0; i < nr; ++i) {
        const double r = (static_cast<double>(i) + 0.5) * dr;
        for (int j = 0; j < nphi; ++j) {
          const double v = harmonic(k, r, static_cast<double>(j) * dphi);
          s += v * v * r * dr * dphi;
        }
      }
      norms_[static_cast<std::size_t>(k)] = std::sqrt(s);
    }
  }

  double zernike_radial(double u, int n, int m) const {
    double out = 0.0;
    const int bound = (n - m) / 2 + 1;
    for (int k = 0; k < bound; ++k) {
      const float sign_fact = (k % 2 ? -1.0f : 1.0f) * fact32_[static_cast<std::size_t>(n - k)];
      double kfact = 1.0;
      for (int j = 2; j <= k; ++j) kfact *= j;
      float den = static_cast<float>(kfact) * fact32_[static_cast<std::size_t>((n + m) / 2 - k)];
      den = den * fact32_[static_cast<std::size_t>((n - m) / 2 - k)];
      out += static_cast<double>(sign_fact) * std::pow(u, static_cast<double>(n - 2 * k)) / static_cast<double>(den);
    }
    return out;
  }

  double zernike(int k, double u, double phi) const {
    const int n = zn_[static_cast<std::size_t>(k)], l = zl_[static_cast<std::size_t>(k)];
    const int m = 2 * l - n;
    const double poly = m < 0 ? zernike_radial(u, n, -m) * std::sin(static_cast<double>(m) * phi)
                              : zernike_radial(u, n, m) * std::cos(static_cast<double>(m) * phi);
    const double eps_m = m == 0 ? 2.0 : 1.0;
    const double norm = std::max(std::sqrt(kPi * eps_m / (2.0 * (static_cast<double>(n) + 1))), 1e-12);
    return poly / norm;
  }

  FilterBasis basis_;
  double rc_;
  int K_ = 0;
  int nr_ = 0, nphi_ = 1;
  double dr_ = 0.0, dphi_ = 0.0;
  std::vector<double> ir_, iphi_;
  int n0_ = 0, n1_ = 0;
  std::vector<double> norms_;
  int nmax_ = 0;
  std::vector<int> zn_, zl_;
  std::vector<float> fact32_;
  std::vector<BesselMode> modes_;
};

/// Kernel indices whose functions are isotropic (the official isotropic_mask; used by "modal").
std::vector<bool> isotropic_mask(FilterBasis basis, const std::vector<int>& shape, int K) {
  std::vector<bool> iso(static_cast<std::size_t>(K), false);
  if (basis == FilterBasis::piecewise_linear) {
    const int nr = shape[0], nphi = shape.size() == 2 ? shape[1] : 1;
    if (nphi == 1) iso.assign(iso.size(), true);
    else if (nr % 2 == 1) iso[0] = true;
  } else if (basis == FilterBasis::zernike) {
    for (int n = 0, k = 0; n < shape[0]; ++n)
      for (int l = 0; l <= n; ++l, ++k) iso[static_cast<std::size_t>(k)] = 2 * l - n == 0;
  } else if (basis == FilterBasis::fourier_bessel) {
    const auto modes = fourier_bessel_modes(shape);
    for (std::size_t k = 0; k < modes.size() && k < iso.size(); ++k) iso[k] = modes[k].m == 0;
  } else {
    iso[0] = true;
  }
  return iso;
}

}  // namespace

const char* to_string(FilterBasis basis) noexcept {
  switch (basis) {
    case FilterBasis::piecewise_linear: return "piecewise linear";
    case FilterBasis::morlet: return "morlet";
    case FilterBasis::zernike: return "zernike";
    case FilterBasis::harmonic: return "harmonic";
    case FilterBasis::fourier_bessel: return "fourier-bessel";
  }
  return "?";
}

const char* to_string(BasisNormMode mode) noexcept {
  switch (mode) {
    case BasisNormMode::none: return "none";
    case BasisNormMode::nodal: return "nodal";
    case BasisNormMode::modal: return "modal";
    case BasisNormMode::mean: return "mean";
    case BasisNormMode::support: return "support";
    case BasisNormMode::geometric: return "geometric";
  }
  return "?";
}

FilterBasis parse_filter_basis(const std::string& name) {
  for (FilterBasis b : {FilterBasis::piecewise_linear, FilterBasis::morlet, FilterBasis::zernike,
                        FilterBasis::harmonic, FilterBasis::fourier_bessel})
    if (name == to_string(b)) return b;
  invalid("basis_type: unknown filter basis \"" + name +
          "\" (torch-harmonics 0.9.3 offers \"piecewise linear\", \"harmonic\", \"morlet\", \"zernike\", "
          "\"fourier-bessel\")");
}

BasisNormMode parse_basis_norm_mode(const std::string& name) {
  if (name == "individual") return BasisNormMode::nodal;
  if (name == "area ratio") return BasisNormMode::geometric;
  for (BasisNormMode m : {BasisNormMode::none, BasisNormMode::nodal, BasisNormMode::modal, BasisNormMode::mean,
                          BasisNormMode::support, BasisNormMode::geometric})
    if (name == to_string(m)) return m;
  invalid("basis_norm_mode: unknown mode \"" + name +
          "\" (torch-harmonics 0.9.3 offers \"none\", \"nodal\", \"modal\", \"mean\", \"support\", \"geometric\" "
          "and the aliases \"individual\", \"area ratio\")");
}

int filter_basis_size(FilterBasis basis, const std::vector<int>& shape) {
  check_shape(basis, shape);
  switch (basis) {
    case FilterBasis::piecewise_linear: {
      const int nr = shape[0], nphi = shape.size() == 2 ? shape[1] : 1;
      return (nr / 2) * nphi + nr % 2;
    }
    case FilterBasis::harmonic:
    case FilterBasis::morlet: return shape[0] * (shape.size() == 2 ? shape[1] : shape[0]);
    case FilterBasis::fourier_bessel: return static_cast<int>(fourier_bessel_modes(shape).size());
    default: return shape[0] * (shape[0] + 1) / 2;
  }
}

double disco_theta_cutoff(const DiscoConfig& c) {
  if (std::isnan(c.theta_cutoff) || std::isinf(c.theta_cutoff))
    invalid("theta_cutoff must be finite, got " + std::to_string(c.theta_cutoff));
  if (c.theta_cutoff > 0.0) return c.theta_cutoff;
  return default_theta_cutoff(c.nlat_out, c.grid_out);
}

double disco_transpose_theta_cutoff(const DiscoConfig& c) {
  if (std::isnan(c.theta_cutoff) || std::isinf(c.theta_cutoff))
    invalid("theta_cutoff must be finite, got " + std::to_string(c.theta_cutoff));
  if (c.theta_cutoff > 0.0) return c.theta_cutoff;
  return default_theta_cutoff(c.nlat_in, c.grid_in);
}

std::vector<double> bessel_j_zeros(int m, int n) {
  if (m < 0 || n < 1)
    invalid("bessel_j_zeros: order m must be >= 0 and the count n >= 1, got m = " + std::to_string(m) +
            ", n = " + std::to_string(n));
  const double nu = m;
  auto J = [nu](double x) { return std::cyl_bessel_j(nu, x); };
  // No zero of J_m lies in (0, m]; consecutive zeros are more than 3 apart (pi - 0.03 at worst, for m = 0),
  // so a scan with step 0.25 from x = m sees each sign change alone.
  std::vector<double> zeros;
  double a = std::max(nu, 0.25), fa = J(a);
  while (static_cast<int>(zeros.size()) < n) {
    const double b = a + 0.25, fb = J(b);
    if (fb == 0.0) {
      zeros.push_back(b);
    } else if ((fa < 0.0) != (fb < 0.0)) {
      // Newton steps on J_m (J_m' = m/x J_m - J_{m+1}) kept inside the bracket, bisection otherwise,
      // until the bracket closes to adjacent doubles or the step vanishes.
      double lo = a, hi = b, flo = fa, x = 0.5 * (a + b);
      for (int it = 0; it < 200; ++it) {
        const double fx = J(x);
        if (fx == 0.0) {
          lo = hi = x;
          break;
        }
        if ((fx < 0.0) == (flo < 0.0)) {
          lo = x;
          flo = fx;
        } else {
          hi = x;
        }
        const double d = nu / x * fx - std::cyl_bessel_j(nu + 1.0, x);
        double next = d != 0.0 ? x - fx / d : 0.5 * (lo + hi);
        if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
        if (next == x || next == lo || next == hi) break;
        x = next;
      }
      // the better end of the final bracket (x lies in it)
      double best = x;
      for (double c : {lo, hi})
        if (std::fabs(J(c)) < std::fabs(J(best))) best = c;
      zeros.push_back(best);
    }
    a = b;
    fa = fb;
  }
  return zeros;
}

namespace {

/// The roles of the two grids when building psi. The forward convolution evaluates the basis on the input
/// grid around each output latitude (rows = output latitudes, columns = input points); the transpose
/// builds the table of the forward convolution from its output grid to its input grid (rows = its input
/// latitudes, columns = its output points) and normalises it "transposed".
struct TableGeometry {
  FilterBasis basis = FilterBasis::piecewise_linear;
  std::vector<int> kernel_shape;
  BasisNormMode norm_mode = BasisNormMode::nodal;
  double cutoff = 0.0;
  int nlat_rows = 0, nlon_rows = 0;
  Grid grid_rows = Grid::equiangular;
  int nlat_cols = 0, nlon_cols = 0;
  Grid grid_cols = Grid::equiangular;
  bool transpose = false;
};

FilterTable build_table(const TableGeometry& c) {
  const double cutoff = c.cutoff;
  const double rc = (1.0 + kThetaCutoffEps) * cutoff;
  const Basis basis(c.basis, c.kernel_shape, rc);
  const int K = basis.size();

  const Latitudes cols = latitudes(c.nlat_cols, c.grid_cols), rows = latitudes(c.nlat_rows, c.grid_rows);
  const std::vector<double> lon = longitudes(c.nlon_cols);
  const std::size_t W = lon.size();
  std::vector<double> cbeta(W), sbeta(W), cgamma(cols.colatitude.size()), sgamma(cols.colatitude.size());
  for (std::size_t w = 0; w < W; ++w) {
    cbeta[w] = std::cos(lon[w]);
    sbeta[w] = std::sin(lon[w]);
  }
  for (std::size_t h = 0; h < cols.colatitude.size(); ++h) {
    cgamma[h] = std::cos(cols.colatitude[h]);
    sgamma[h] = std::sin(cols.colatitude[h]);
  }

  // Entries in the official construction order (t, k, hi, wi); group g = (k, t) is contiguous.
  std::vector<std::int64_t> ker, row, col;
  std::vector<double> val;
  std::vector<double> r_pt, phi_pt;
  std::vector<std::int64_t> col_pt;
  const auto& ci = cols.colatitude;
  for (int t = 0; t < c.nlat_rows; ++t) {
    const double theta_out = rows.colatitude[static_cast<std::size_t>(t)];
    const auto lo = static_cast<int>(std::lower_bound(ci.begin(), ci.end(), theta_out - rc) - ci.begin());
    const auto hi = static_cast<int>(std::upper_bound(ci.begin(), ci.end(), theta_out + rc) - ci.begin()) - 1;
    const double alpha = -theta_out, ca = std::cos(alpha), sa = std::sin(alpha);
    r_pt.clear();
    phi_pt.clear();
    col_pt.clear();
    for (int h = lo; h <= hi; ++h) {
      const double cg = cgamma[static_cast<std::size_t>(h)], sg = sgamma[static_cast<std::size_t>(h)];
      for (std::size_t w = 0; w < W; ++w) {
        const double cb = cbeta[w], sb = sbeta[w];
        double x = ca * cb * sg + cg * sa;
        double y = sb * sg;
        double z = -cb * sa * sg + ca * cg;
        const double norm = std::sqrt(x * x + y * y + z * z);
        x = x / norm;
        y = y / norm;
        z = z / norm;
        const double theta = std::acos(z);
        if (!(theta <= rc)) continue;  // every basis function vanishes outside r <= rc
        double phi = std::atan2(y, x);
        if (phi < 0.0) phi = phi + 2.0 * kPi;
        r_pt.push_back(theta);
        phi_pt.push_back(phi);
        col_pt.push_back(static_cast<std::int64_t>(h) * c.nlon_cols + static_cast<std::int64_t>(w));
      }
    }
    for (int k = 0; k < K; ++k)
      for (std::size_t i = 0; i < r_pt.size(); ++i) {
        double v = 0.0;
        if (!basis.eval(k, r_pt[i], phi_pt[i], v)) continue;
        ker.push_back(k);
        row.push_back(t);
        col.push_back(col_pt[i]);
        val.push_back(v);
      }
  }

  // Normalisation per group, sums in the construction order, as the official scatter_add. Forward: groups
  // (k, row latitude), quadrature weight of the column latitude. Transpose: groups (k, column latitude),
  // quadrature weight of the row latitude (both divided by the column grid's nlon).
  const int nlat_groups = c.transpose ? c.nlat_cols : c.nlat_rows;
  const std::size_t nnz = val.size(), G = static_cast<std::size_t>(K) * static_cast<std::size_t>(nlat_groups);
  std::vector<double> q(nnz), support(G, 0.0), bias(G, 0.0), scale(G, 0.0);
  std::vector<std::size_t> gid(nnz);
  for (std::size_t n = 0; n < nnz; ++n) {
    const std::int64_t col_lat = col[n] / c.nlon_cols;
    q[n] = c.transpose ? rows.weight[static_cast<std::size_t>(row[n])] / c.nlon_cols / 2.0
                       : cols.weight[static_cast<std::size_t>(col_lat)] / c.nlon_cols / 2.0;
    gid[n] = static_cast<std::size_t>(ker[n]) * static_cast<std::size_t>(nlat_groups) +
             static_cast<std::size_t>(c.transpose ? col_lat : row[n]);
    support[gid[n]] += q[n];
  }
  const BasisNormMode mode = c.norm_mode;
  if (mode == BasisNormMode::modal) {
    const std::vector<bool> iso = isotropic_mask(c.basis, c.kernel_shape, K);
    std::vector<double> num(G, 0.0);
    for (std::size_t n = 0; n < nnz; ++n)
      num[gid[n]] += val[n] * q[n] * (iso[static_cast<std::size_t>(ker[n])] ? 0.0 : 1.0);
    for (std::size_t g = 0; g < G; ++g) bias[g] = std::fabs(support[g]) > kNormEps ? num[g] / std::max(support[g], kNormEps) : 0.0;
  }
  for (std::size_t n = 0; n < nnz; ++n) scale[gid[n]] += std::fabs(val[n] - bias[gid[n]]) * q[n];
  if (mode == BasisNormMode::nodal || mode == BasisNormMode::modal) {
    for (std::size_t n = 0; n < nnz; ++n) val[n] = (val[n] - bias[gid[n]]) / std::max(scale[gid[n]], kNormEps);
  } else if (mode == BasisNormMode::mean) {
    std::vector<double> bias_k(static_cast<std::size_t>(K), 0.0), scale_k(static_cast<std::size_t>(K), 0.0);
    for (int k = 0; k < K; ++k) {
      for (int t = 0; t < nlat_groups; ++t) {
        const std::size_t g = static_cast<std::size_t>(k) * static_cast<std::size_t>(nlat_groups) + static_cast<std::size_t>(t);
        bias_k[static_cast<std::size_t>(k)] += bias[g];
        scale_k[static_cast<std::size_t>(k)] += scale[g];
      }
      bias_k[static_cast<std::size_t>(k)] /= nlat_groups;
      scale_k[static_cast<std::size_t>(k)] /= nlat_groups;
    }
    for (std::size_t n = 0; n < nnz; ++n) {
      const auto k = static_cast<std::size_t>(ker[n]);
      val[n] = (val[n] - bias_k[k]) / std::max(scale_k[k], kNormEps);
    }
  } else if (mode == BasisNormMode::support) {
    for (std::size_t n = 0; n < nnz; ++n) val[n] = val[n] / std::max(support[gid[n]], kNormEps);
  } else if (mode == BasisNormMode::geometric) {
    const double s = std::max((1.0 - std::cos(cutoff)) / 2.0 / 2.0, kNormEps);
    for (std::size_t n = 0; n < nnz; ++n) val[n] = val[n] / s;
  }
  for (std::size_t n = 0; n < nnz; ++n) val[n] = val[n] * q[n];
  if (c.transpose) {
    // the official correction for the longitude ratio: divided by nlon_rows / nlon_cols
    const double correction = static_cast<double>(c.nlon_rows) / static_cast<double>(c.nlon_cols);
    for (std::size_t n = 0; n < nnz; ++n) val[n] = val[n] / correction;
  }

  // Stable counting sort by kernel index (the official preprocess_psi): order (k, t, hi, wi).
  FilterTable table;
  table.kernel_size = K;
  table.nlat_out = c.nlat_rows;
  table.nlat_in = c.nlat_cols;
  table.nlon_in = c.nlon_cols;
  std::vector<std::size_t> start(static_cast<std::size_t>(K) + 1, 0);
  for (std::size_t n = 0; n < nnz; ++n) ++start[static_cast<std::size_t>(ker[n]) + 1];
  for (std::size_t k = 0; k < static_cast<std::size_t>(K); ++k) start[k + 1] += start[k];
  table.ker.resize(nnz);
  table.row.resize(nnz);
  table.col.resize(nnz);
  table.val.resize(nnz);
  for (std::size_t n = 0; n < nnz; ++n) {
    const std::size_t dst = start[static_cast<std::size_t>(ker[n])]++;
    table.ker[dst] = ker[n];
    table.row[dst] = row[n];
    table.col[dst] = col[n];
    table.val[dst] = val[n];
  }
  return table;
}

}  // namespace

FilterTable compute_filter_table(const DiscoConfig& c) {
  if (c.nlat_in < 1 || c.nlon_in < 1) invalid("DISCO: in_shape (nlat_in, nlon_in) must be positive");
  if (c.nlat_out < 1 || c.nlon_out < 1) invalid("DISCO: out_shape (nlat_out, nlon_out) must be positive");
  if (c.nlon_in % c.nlon_out != 0)
    throw Error(ErrorCode::unsupported,
                "DISCO: nlon_in (" + std::to_string(c.nlon_in) + ") must be an integer multiple of nlon_out (" +
                    std::to_string(c.nlon_out) +
                    "); for upsampling use the transpose convolution (compute_transpose_filter_table, "
                    "DiscoConvTransposeS2)");
  TableGeometry g;
  g.basis = c.basis;
  g.kernel_shape = c.kernel_shape;
  g.norm_mode = c.norm_mode;
  g.cutoff = disco_theta_cutoff(c);
  g.nlat_rows = c.nlat_out;
  g.nlon_rows = c.nlon_out;
  g.grid_rows = c.grid_out;
  g.nlat_cols = c.nlat_in;
  g.nlon_cols = c.nlon_in;
  g.grid_cols = c.grid_in;
  return build_table(g);
}

FilterTable compute_transpose_filter_table(const DiscoConfig& c) {
  if (c.nlat_in < 1 || c.nlon_in < 1) invalid("DISCO transpose: in_shape (nlat_in, nlon_in) must be positive");
  if (c.nlat_out < 1 || c.nlon_out < 1) invalid("DISCO transpose: out_shape (nlat_out, nlon_out) must be positive");
  if (c.nlon_out % c.nlon_in != 0)
    throw Error(ErrorCode::unsupported, "DISCO transpose: nlon_out (" + std::to_string(c.nlon_out) +
                                            ") must be an integer multiple of nlon_in (" + std::to_string(c.nlon_in) +
                                            ")");
  TableGeometry g;
  g.basis = c.basis;
  g.kernel_shape = c.kernel_shape;
  g.norm_mode = c.norm_mode;
  g.cutoff = disco_transpose_theta_cutoff(c);
  g.nlat_rows = c.nlat_in;
  g.nlon_rows = c.nlon_in;
  g.grid_rows = c.grid_in;
  g.nlat_cols = c.nlat_out;
  g.nlon_cols = c.nlon_out;
  g.grid_cols = c.grid_out;
  g.transpose = true;
  return build_table(g);
}

}  // namespace surrogate::sphere
