#include "svg_plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "feedline/core/markup.hpp"
#include "feedline/core/text.hpp"

namespace feedline::loader::svg {
namespace {

constexpr double kWidth = 640, kHeight = 260;
constexpr double kLeft = 64, kRight = 16, kTop = 34, kBottom = 44;

// About 5 round ticks over [lo, hi].
std::vector<double> linear_ticks(double lo, double hi) {
  std::vector<double> t;
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / 5;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  }
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(v);
  return t;
}

std::string tick_label(double v, const std::string& unit) {
  if (unit == "%") return fmt::format("{:g}%", std::round(v * 1000) / 10);
  const double a = std::abs(v);
  std::string s;
  if (a >= 1e9) {
    s = fmt::format("{:g}G", v / 1e9);
  } else if (a >= 1e6) {
    s = fmt::format("{:g}M", v / 1e6);
  } else if (a >= 1e4) {
    s = fmt::format("{:g}k", v / 1e3);
  } else {
    s = fmt::format("{:g}", std::round(v * 1000) / 1000);
  }
  return unit.empty() ? s : s + " " + unit;
}

}  // namespace

std::string escape(std::string_view text) { return markup_escape(printable(text)); }

std::string line_chart(const LineChart& c) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0;
  double y0 = c.y_min, y1 = c.y_max;
  bool any = false;
  for (const auto& s : c.series) {
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (c.log_x && s.x[i] <= 0)) continue;
      any = true;
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      if (c.y_max == 0) y1 = std::max(y1, s.y[i]);
    }
  }
  std::string out = fmt::format(
      "<figure class=\"plot\" data-plot=\"{}\"><figcaption>{}</figcaption>"
      "<svg viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\" role=\"img\" aria-label=\"{}\">",
      escape(c.id), escape(c.title), kWidth, kHeight, kWidth, kHeight, escape(c.title));
  if (!any) {
    out += fmt::format(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"empty\">no data</text></svg>"
        "</figure>",
        kWidth / 2, kHeight / 2);
    return out;
  }
  if (c.log_x) {
    x0 = std::pow(10, std::floor(std::log10(x0)));
    x1 = std::pow(10, std::ceil(std::log10(x1)));
  }
  if (!(x1 > x0)) x1 = x0 + 1;
  if (!(y1 > y0)) y1 = y0 + 1;
  if (c.y_max == 0) y1 *= 1.08;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) {
    const double f = c.log_x ? (std::log10(x) - std::log10(x0)) / (std::log10(x1) - std::log10(x0))
                             : (x - x0) / (x1 - x0);
    return kLeft + f * pw;
  };
  auto py = [&](double y) { return kTop + ph - (std::clamp(y, y0, y1) - y0) / (y1 - y0) * ph; };
  // Grid and ticks.
  out += "<g class=\"axes\">";
  for (double t : linear_ticks(y0, y1)) {
    out += fmt::format(
        "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" class=\"grid\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>",
        kLeft, kLeft + pw, py(t), py(t), kLeft - 6, py(t) + 4, escape(tick_label(t, c.y_unit)));
  }
  std::vector<double> xt;
  if (c.log_x) {
    for (double v = x0; v <= x1 * 1.0001; v *= 10) xt.push_back(v);
  } else {
    xt = linear_ticks(x0, x1);
  }
  for (double t : xt) {
    out += fmt::format(
        "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" class=\"grid\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>",
        px(t), px(t), kTop, kTop + ph, px(t), kTop + ph + 16, escape(tick_label(t, "")));
  }
  out += fmt::format(
      "<line x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\" class=\"axis\"/>"
      "<line x1=\"{0}\" x2=\"{3}\" y1=\"{2}\" y2=\"{2}\" class=\"axis\"/>"
      "<text x=\"{4}\" y=\"{5}\" text-anchor=\"middle\" class=\"label\">{6}</text>"
      "<text transform=\"translate(14 {7}) rotate(-90)\" text-anchor=\"middle\" "
      "class=\"label\">{8}</text></g>",
      kLeft, kTop, kTop + ph, kLeft + pw, kLeft + pw / 2, kHeight - 6, escape(c.x_label),
      kTop + ph / 2, escape(c.y_label));
  // Series, and a legend above the plot.
  double lx = kLeft;
  for (const auto& s : c.series) {
    std::string d;
    std::size_t n = 0;
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (c.log_x && s.x[i] <= 0)) continue;
      d += fmt::format("{}{:.1f},{:.1f}", n == 0 ? "M" : "L", px(s.x[i]), py(s.y[i]));
      ++n;
    }
    if (s.markers) {
      out += fmt::format("<g class=\"series\" data-series=\"{}\" data-points=\"{}\" fill=\"{}\">",
                         escape(s.name), n, s.color);
      for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
        if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (c.log_x && s.x[i] <= 0)) continue;
        out += fmt::format(
            "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\"><title>{}: {:g}, {:g}</title></circle>",
            px(s.x[i]), py(s.y[i]), escape(s.name), s.x[i], s.y[i]);
      }
      out += "</g>";
    } else {
      if (n == 1) d += "h1";  // one point: a dot's worth of line
      out += fmt::format(
          "<path class=\"series\" data-series=\"{}\" data-points=\"{}\" d=\"{}\" stroke=\"{}\" "
          "fill=\"none\" stroke-width=\"2\"{}><title>{}</title></path>",
          escape(s.name), n, d, s.color, s.dashed ? " stroke-dasharray=\"6 4\"" : "",
          escape(s.name));
    }
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"10\" width=\"12\" height=\"12\" fill=\"{}\"/>"
        "<text x=\"{:.1f}\" y=\"20\" class=\"legend\">{}</text>",
        lx, s.color, lx + 16, escape(s.name));
    lx += 16 + 7.2 * static_cast<double>(s.name.size()) + 18;
  }
  out += "</svg></figure>";
  return out;
}

std::string stacked_bars(const std::string& id, const std::string& title,
                         const std::vector<Bar>& bars) {
  const double row = 30, left = 170, width = 640, right = 16, top = 34;
  const double height = top + row * static_cast<double>(bars.size()) + 10;
  const double pw = width - left - right;
  std::string out = fmt::format(
      "<figure class=\"plot\" data-plot=\"{}\"><figcaption>{}</figcaption>"
      "<svg viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\" role=\"img\" aria-label=\"{}\">",
      escape(id), escape(title), width, height, width, height, escape(title));
  std::vector<std::pair<std::string, std::string>> legend;
  for (std::size_t r = 0; r < bars.size(); ++r) {
    const Bar& b = bars[r];
    const double y = top + row * static_cast<double>(r);
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", left - 8,
                       y + row / 2 + 2, escape(b.label));
    double x = left;
    for (const auto& s : b.segments) {
      const double w = std::clamp(s.value, 0.0, 1.0) * pw;
      out += fmt::format(
          "<rect class=\"segment\" data-bar=\"{}\" data-segment=\"{}\" data-value=\"{:.4f}\" "
          "x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{} "
          "{}: {:.1f}%</title></rect>",
          escape(b.label), escape(s.name), s.value, x, y + 4, w, row - 10, s.color, escape(b.label),
          escape(s.name), s.value * 100);
      if (w > 34) {
        out += fmt::format(
            "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" class=\"inbar\">{:.0f}%</text>",
            x + w / 2, y + row / 2 + 2, s.value * 100);
      }
      x += w;
      if (std::none_of(legend.begin(), legend.end(),
                       [&](const auto& l) { return l.first == s.name; }))
        legend.emplace_back(s.name, s.color);
    }
  }
  double lx = left;
  for (const auto& [name, color] : legend) {
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"10\" width=\"12\" height=\"12\" fill=\"{}\"/>"
        "<text x=\"{:.1f}\" y=\"20\" class=\"legend\">{}</text>",
        lx, color, lx + 16, escape(name));
    lx += 16 + 7.2 * static_cast<double>(name.size()) + 18;
  }
  out += "</svg></figure>";
  return out;
}

}  // namespace feedline::loader::svg
