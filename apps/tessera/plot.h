#pragma once
// Line plots written as PNG (for the fit commands' outputs).
#include <array>
#include <string>
#include <vector>

namespace tessera::app {

struct Series {
  std::string label;
  std::vector<double> x, y;
  std::array<unsigned char, 3> color;
};

struct PlotOptions {
  std::string title, x_label, y_label;
  bool log_y = false;
  int width = 900, height = 500;
};

// Writes the plot atomically; errors name the path.
void write_line_plot_png(const std::string& path, const std::vector<Series>& series, const PlotOptions& options);

// Encodes RGB8 pixels as PNG and writes them atomically.

}  // namespace tessera::app
