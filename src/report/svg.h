// Inline SVG for the HTML report: grouped horizontal bar charts, drawn in C++ so the page needs
// no script, no library and no network, and its output is testable text. Internal to src/report/.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpubench::report {

/// Escapes text for HTML and SVG (content and attribute values): & < > " '.
std::string html_escape(std::string_view text);

/// One bar. A bar without a value draws no rectangle, only its text (e.g. "OOM").
struct Bar {
  std::string label;            ///< left of the bar: "H200 fp32", "RTX 2060"
  std::optional<double> value;  ///< bar length in axis units
  std::string text;             ///< printed at the end of the bar: "20.0", "OOM"
  std::string color;            ///< CSS colour: "#c0392b"
  std::string tooltip;          ///< the bar's <title> (accessible name)
  bool muted = false;           ///< a 2020 bar (lighter label)
};

/// Bars under one heading (one model, or one family's summary).
struct BarGroup {
  std::string label;
  std::vector<Bar> bars;
};

/// A grouped horizontal bar chart on one linear axis starting at 0.
struct BarChart {
  std::string id;           ///< unique in the page: "chart-image"
  std::string title;        ///< the SVG's <title> (its accessible name)
  std::string description;  ///< the SVG's <desc>: what it shows, in words
  std::string axis_label;   ///< under the axis
  std::optional<double> marker;  ///< a dashed line at this value (1.0: the baseline)
  double min_axis_max = 0;  ///< the axis reaches at least this (room for long value texts)
  std::vector<BarGroup> groups;
};

/// The chart as one <svg> element (role="img", labelled by its <title> and <desc>).
std::string render_bar_chart(const BarChart& chart);

/// A step of 1, 2 or 5 times a power of ten that cuts [0, max] into about `ticks` parts.
double nice_step(double max, int ticks);

}  // namespace gpubench::report
