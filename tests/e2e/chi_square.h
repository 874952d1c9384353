// Chi-square tools for the checks that compare sampled distributions.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <utility>

namespace kiln::testing {

// Upper regularised incomplete gamma Q(a, x): the chi-square survival
// function is Q(df/2, x/2). Series for x < a+1, continued fraction otherwise.
inline double GammaQ(double a, double x) {
  if (x <= 0) return 1.0;
  const double lg = std::lgamma(a);
  if (x < a + 1) {
    double sum = 1.0 / a, term = sum;
    for (int n = 1; n < 1000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (term < sum * 1e-15) break;
    }
    return 1.0 - sum * std::exp(-x + a * std::log(x) - lg);
  }
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::fabs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-15) break;
  }
  return std::exp(-x + a * std::log(x) - lg) * h;
}

// Two-sample chi-square homogeneity p-value; tokens seen fewer than 10
// times in both samples together share one bin.
inline double HomogeneityP(const std::map<int32_t, int>& a, const std::map<int32_t, int>& b, int* bins_out) {
  std::map<int32_t, std::pair<double, double>> bins;
  std::pair<double, double> rare{0, 0};
  std::map<int32_t, int> all = a;
  for (auto [t, n] : b) all[t] += n;
  for (auto [t, n] : all) {
    const double na = a.count(t) ? a.at(t) : 0, nb = b.count(t) ? b.at(t) : 0;
    if (n < 10) {
      rare.first += na;
      rare.second += nb;
    } else {
      bins[t] = {na, nb};
    }
  }
  if (rare.first + rare.second > 0) bins[-1] = rare;
  double ta = 0, tb = 0;
  for (auto& [t, c] : bins) {
    ta += c.first;
    tb += c.second;
  }
  double chi2 = 0;
  for (auto& [t, c] : bins) {
    const double total = c.first + c.second;
    const double ea = total * ta / (ta + tb), eb = total * tb / (ta + tb);
    chi2 += (c.first - ea) * (c.first - ea) / ea + (c.second - eb) * (c.second - eb) / eb;
  }
  const int df = static_cast<int>(bins.size()) - 1;
  *bins_out = static_cast<int>(bins.size());
  return GammaQ(df / 2.0, chi2 / 2.0);
}

}  // namespace kiln::testing
