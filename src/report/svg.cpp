// Grouped horizontal bar charts as inline SVG. Layout, top to bottom: tick labels, then per
// group a heading line and one row per bar (label | bar | value) over grid lines, then tick
// labels again and the axis label.
// Coordinates are printed with one decimal so the output is stable across platforms.
#include "src/report/svg.h"

#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace gpubench::report {

namespace {

constexpr double kWidth = 960;       // the whole chart [px]
constexpr double kLabelWidth = 200;  // bar labels, right-aligned against the plot
constexpr double kPlotWidth = 620;   // the longest bar; the rest is room for its value
constexpr double kTop = 26;          // tick labels above the plot
constexpr double kGroupHeading = 20;
constexpr double kRow = 15;          // one bar row
constexpr double kBarHeight = 11;
constexpr double kGroupGap = 8;
constexpr double kBottom = 34;  // tick labels below and the axis label

std::string px(double v) { return fmt::format("{:.1f}", v); }

std::string tick_text(double v) {
  // Ticks are multiples of a 1-2-5 step, so a short decimal form is exact enough.
  return format_number(std::round(v * 1000) / 1000);
}

}  // namespace

std::string html_escape(std::string_view raw) {
  // Valid UTF-8 first (a browser would guess at bytes that are not), and no C0 control but tab
  // and newline: HTML forbids them as text, and they are never meant in a name or a message.
  const std::string text = valid_utf8(raw);
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto byte = static_cast<unsigned char>(ch);
    if ((byte < 0x20 && ch != '\n' && ch != '\t') || byte == 0x7f) {
      out += "&#xFFFD;";
      continue;
    }
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

double nice_step(double max, int ticks) {
  if (!(max > 0) || ticks < 1) return 1;
  const double raw = max / ticks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * power >= raw) return m * power;
  }
  return 10 * power;
}

std::string render_bar_chart(const BarChart& chart) {
  double max = std::max(chart.marker.value_or(0), chart.min_axis_max);
  std::size_t rows = 0;
  for (const auto& group : chart.groups) {
    rows += group.bars.size();
    for (const auto& bar : group.bars) {
      if (bar.value) max = std::max(max, *bar.value);
    }
  }
  const double step = nice_step(max > 0 ? max : 1, 5);
  const double axis_max = std::max(step, std::ceil(max / step - 1e-9) * step);
  const double plot_height = static_cast<double>(chart.groups.size()) *
                                 (kGroupHeading + kGroupGap) +
                             static_cast<double>(rows) * kRow;
  const double height = kTop + plot_height + kBottom;
  auto x_of = [&](double v) { return kLabelWidth + v / axis_max * kPlotWidth; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" id=\"{0}\" width=\"{1}\" "
      "height=\"{2}\" viewBox=\"0 0 {1} {2}\" role=\"img\" aria-labelledby=\"{0}-title "
      "{0}-desc\">\n<title id=\"{0}-title\">{3}</title>\n<desc id=\"{0}-desc\">{4}</desc>\n",
      html_escape(chart.id), px(kWidth), px(height), html_escape(chart.title),
      html_escape(chart.description));

  // Tick labels above and below the plot; grid lines and the marker are drawn per group, beside
  // the bars only, so they never cross a group's heading.
  const double bottom = kTop + plot_height;
  std::vector<double> ticks;
  for (int i = 0; i * step <= axis_max + 1e-9; ++i) ticks.push_back(i * step);
  svg += "<g class=\"axis\" aria-hidden=\"true\">\n";
  for (double tick : ticks) {
    svg += fmt::format(
        "<text x=\"{0}\" y=\"{1}\" text-anchor=\"middle\">{2}</text>\n"
        "<text x=\"{0}\" y=\"{3}\" text-anchor=\"middle\">{2}</text>\n",
        px(x_of(tick)), px(kTop - 10), tick_text(tick), px(bottom + 14));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"axis-label\">{}</text>\n",
                     px(kLabelWidth + kPlotWidth / 2), px(height - 4),
                     html_escape(chart.axis_label));
  svg += "</g>\n";

  const double marker_x = chart.marker ? x_of(*chart.marker) : kLabelWidth;
  double y = kTop;
  for (const auto& group : chart.groups) {
    svg +=
        fmt::format("<g class=\"group\">\n<text x=\"8\" y=\"{}\" class=\"group-label\">{}</text>\n",
                    px(y + 14), html_escape(shortened(group.label, 120)));
    y += kGroupHeading;
    if (!group.bars.empty()) {
      const double block_bottom = y + static_cast<double>(group.bars.size()) * kRow - 2;
      svg += "<g aria-hidden=\"true\">";
      for (double tick : ticks) {
        svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" class=\"grid\"/>",
                           px(x_of(tick)), px(y - 2), px(block_bottom));
      }
      if (chart.marker) {
        svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" class=\"marker\"/>",
                           px(marker_x), px(y - 2), px(block_bottom));
      }
      svg += "</g>\n";
    }
    for (const auto& bar : group.bars) {
      const double text_y = y + kBarHeight - 1.5;
      svg +=
          fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"{}\">{}</text>\n",
                      px(kLabelWidth - 6), px(text_y), bar.muted ? "bar-label muted" : "bar-label",
                      html_escape(shortened(bar.label, 60)));
      double end = kLabelWidth;
      if (bar.value && *bar.value > 0) {
        // At least one pixel, so a 0.3x bar next to a 40x one is still seen.
        const double width = std::max(1.0, x_of(*bar.value) - kLabelWidth);
        svg += fmt::format(
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}</title></rect>\n",
            px(kLabelWidth), px(y), px(width), px(kBarHeight), html_escape(bar.color),
            html_escape(bar.tooltip));
        end += width;
      }
      // Short bars print their value past the marker line, not across it.
      svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"{}\">{}</text>\n",
                         px(std::max(end, marker_x) + 4), px(text_y),
                         bar.value ? "value" : "value missing", html_escape(bar.text));
      y += kRow;
    }
    y += kGroupGap;
    svg += "</g>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace gpubench::report
