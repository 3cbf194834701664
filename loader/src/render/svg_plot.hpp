// Plots as inline SVG for the HTML report: line charts (linear or log x), stacked bars. Drawn
// here rather than by a JavaScript library: the report must open with no network and no script
// to run, print as it shows, and let a test find every drawn series in the DOM (each series is a
// <path class="series" data-points="N">). Nothing in Debian draws SVG charts from C++; the few
// hundred lines below are axes, ticks and paths.
#pragma once

#include <string>
#include <vector>

namespace feedline::loader::svg {

struct Series {
  std::string name;
  std::string color;  // CSS colour
  std::vector<double> x, y;
  bool dashed = false;
  bool markers = false;  // points as dots, no line (a scatter)
};

struct LineChart {
  std::string id;  // data-plot="ID"
  std::string title;
  std::string x_label, y_label;
  std::vector<Series> series;
  bool log_x = false;
  double y_min = 0;
  double y_max = 0;  // 0: from the data
  // Labels on the x axis' ticks: "{}" of the value, or "%" ("50%"), or "ms".
  std::string y_unit;
};
std::string line_chart(const LineChart& c);

struct Segment {
  std::string name;
  std::string color;
  double value = 0;  // a fraction of the bar (0..1)
};
struct Bar {
  std::string label;
  std::vector<Segment> segments;
};
// Horizontal bars of stacked fractions, one per row, with a legend.
std::string stacked_bars(const std::string& id, const std::string& title,
                         const std::vector<Bar>& bars);

// Escapes text for HTML and SVG: & < > " ' as entities; control characters (newlines too) and
// bytes that are not UTF-8 as \xHH (printable(), feedline/core/text.hpp), so that a name shows
// as an error line shows it.
std::string escape(std::string_view text);

}  // namespace feedline::loader::svg
