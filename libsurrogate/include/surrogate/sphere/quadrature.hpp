// Latitude-longitude grids of the sphere and their quadrature, as torch-harmonics (0.9.x) defines them:
// a 1-D rule on x = cos(colatitude) in [-1, 1] (computed in float64), colatitudes arccos(x) ordered
// north first (colatitude increasing), longitudes 2 pi w / nlon (w = 0 .. nlon-1), per-point weights
// 2 pi w_lat / nlon that sum to 4 pi. Semantics and version notes: share/docs/sphere.md;
// specification: docs/reference-models.md §5.2.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace surrogate::sphere {

/// The four grids of torch-harmonics, under their torch-harmonics names:
///  * equiangular             ("equiangular"): Clenshaw-Curtis; nodes equally spaced in colatitude,
///                            both poles included; exact for polynomials in cos(colatitude) of degree
///                            n-1 (n odd: n);
///  * legendre_gauss          ("legendre-gauss"): Gauss-Legendre, no poles, exact to degree 2n-1;
///  * lobatto                 ("lobatto"): Gauss-Legendre-Lobatto, both poles, exact to degree 2n-3;
///  * equiangular_trapezoidal ("equiangular-trapezoidal"): the trapezoid rule on nodes equally spaced
///                            in x = cos(colatitude) (not in colatitude, despite the name), both poles,
///                            half weight at the ends, exact to degree 1.
enum class Grid { equiangular, legendre_gauss, lobatto, equiangular_trapezoidal };

/// The torch-harmonics name of a grid.
const char* to_string(Grid grid) noexcept;
/// The grid of a torch-harmonics name; anything else is an Error (invalid_argument) naming `argument`.
Grid parse_grid(std::string_view name, std::string_view argument = "grid");

/// A 1-D rule on [-1, 1]: nodes x ascending (south pole side first, as torch-harmonics computes them
/// before flipping) and weights summing to 2.
struct Rule {
  std::vector<double> x;
  std::vector<double> w;
};

/// The 1-D rule of `grid` with n nodes (n >= 2; Gauss-Legendre also n = 1).
Rule quadrature_rule(Grid grid, int n);

/// Latitudes of a grid: colatitude (radians, = arccos(x) of the rule, ascending: index 0 is the north
/// side) and the latitude weights in the same order (sum 2).
struct Latitudes {
  std::vector<double> colatitude;
  std::vector<double> weight;
};
Latitudes latitudes(int nlat, Grid grid);

/// Longitudes 2 pi w / nlon, w = 0 .. nlon-1 (float64; 2 pi excluded).
std::vector<double> longitudes(int nlon);

/// Per-point quadrature weights of the (nlat, nlon) grid, row-major (latitude, longitude):
/// 2 pi w_lat / nlon in float64. They sum to 4 pi.
std::vector<double> point_weights(int nlat, int nlon, Grid grid);

/// The per-latitude weights that torch-harmonics' attention layers use (buffer `quad_weights`):
/// float32, computed as (float)(2 pi) * (float)w_lat / (float)nlon in float32 arithmetic, nlat values.
std::vector<float> attention_latitude_weights(int nlat, int nlon, Grid grid);

}  // namespace surrogate::sphere
