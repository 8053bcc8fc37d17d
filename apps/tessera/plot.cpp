#include "plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <stb/stb_easy_font.h>

#include "tessera/core/config.h"
#include "tessera/core/error.h"
#include "tessera/core/image_io.h"

namespace tessera::app {

namespace {

struct Canvas {
  int w, h;
  std::vector<unsigned char> px;
  Canvas(int w_, int h_) : w(w_), h(h_), px(size_t(w_) * h_ * 3, 255) {}
  void set(int x, int y, std::array<unsigned char, 3> c) {
    if (x < 0 || y < 0 || x >= w || y >= h) return;
    std::copy(c.begin(), c.end(), px.begin() + (size_t(y) * w + x) * 3);
  }
  void rect(int x0, int y0, int x1, int y1, std::array<unsigned char, 3> c) {
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) set(x, y, c);
  }
  // Thick-ish line by stepping along the longer axis.
  void line(double x0, double y0, double x1, double y1, std::array<unsigned char, 3> c) {
    const int steps = int(std::max(std::abs(x1 - x0), std::abs(y1 - y0))) + 1;
    for (int i = 0; i <= steps; ++i) {
      const double t = double(i) / steps;
      const int x = int(std::lround(x0 + t * (x1 - x0))), y = int(std::lround(y0 + t * (y1 - y0)));
      set(x, y, c);
      set(x, y + 1, c);
    }
  }
  void text(int x, int y, const std::string& s, std::array<unsigned char, 3> c, int scale = 1) {
    static char buffer[99999];
    std::string copy = s;
    const int quads = stb_easy_font_print(0, 0, copy.data(), nullptr, buffer, sizeof(buffer));
    const float* v = reinterpret_cast<const float*>(buffer);
    for (int q = 0; q < quads; ++q) {
      // each vertex: x, y, z, color(4 bytes) = 16 bytes; a quad is 4 vertices
      const float* quad = v + q * 16;
      const int qx0 = int(quad[0]), qy0 = int(quad[1]), qx1 = int(quad[8]), qy1 = int(quad[9]);
      rect(x + qx0 * scale, y + qy0 * scale, x + qx1 * scale, y + qy1 * scale, c);
    }
  }
};

std::string tick_label(double v) {
  if (v != 0 && (std::abs(v) < 1e-2 || std::abs(v) >= 1e4)) return format_message("{:.0e}", v);
  return format_message("{:.3g}", v);
}

}  // namespace

void write_line_plot_png(const std::string& path, const std::vector<Series>& series, const PlotOptions& o) {
  Canvas cv(o.width, o.height);
  const int left = 80, right = o.width - 20, top = 40, bottom = o.height - 50;
  auto ty = [&](double y) { return o.log_y ? std::log10(std::max(y, 1e-30)) : y; };
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  for (const auto& s : series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i]) || (o.log_y && s.y[i] <= 0)) continue;
      xmin = std::min(xmin, s.x[i]);
      xmax = std::max(xmax, s.x[i]);
      ymin = std::min(ymin, ty(s.y[i]));
      ymax = std::max(ymax, ty(s.y[i]));
    }
  if (!(xmax > xmin)) xmax = xmin + 1;
  if (!(ymax > ymin)) ymax = ymin + 1;
  if (o.log_y) {
    ymin = std::floor(ymin);
    ymax = std::ceil(ymax);
  } else {
    const double pad = 0.05 * (ymax - ymin);
    ymin -= pad;
    ymax += pad;
  }
  auto px = [&](double x) { return left + (x - xmin) / (xmax - xmin) * (right - left); };
  auto py = [&](double y) { return bottom - (ty(y) - ymin) / (ymax - ymin) * (bottom - top); };
  const std::array<unsigned char, 3> grid{225, 225, 225}, ink{40, 40, 40};
  for (int i = 0; i <= 5; ++i) {
    const double yv = ymin + (ymax - ymin) * i / 5, xv = xmin + (xmax - xmin) * i / 5;
    const int yy = int(bottom - (bottom - top) * i / 5.0), xx = int(left + (right - left) * i / 5.0);
    cv.rect(left, yy, right, yy + 1, grid);
    cv.rect(xx, top, xx + 1, bottom, grid);
    cv.text(8, yy - 4, tick_label(o.log_y ? std::pow(10.0, yv) : yv), ink);
    cv.text(xx - 10, bottom + 8, tick_label(xv), ink);
  }
  cv.rect(left, top, left + 1, bottom, ink);
  cv.rect(left, bottom, right, bottom + 1, ink);
  for (const auto& s : series)
    for (size_t i = 1; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i]) || !std::isfinite(s.y[i - 1])) continue;
      if (o.log_y && (s.y[i] <= 0 || s.y[i - 1] <= 0)) continue;
      cv.line(px(s.x[i - 1]), py(s.y[i - 1]), px(s.x[i]), py(s.y[i]), s.color);
    }
  cv.text(left, 12, o.title, ink, 2);
  cv.text((left + right) / 2 - 20, o.height - 22, o.x_label, ink);
  // The key in the top right corner, as wide as its longest label.
  int label_width = 0;
  for (const auto& s : series) {
    std::string copy = s.label;
    label_width = std::max(label_width, stb_easy_font_width(copy.data()));
  }
  const int key_x = right - label_width - 28;
  cv.rect(key_x - 4, top + 4, right - 2, top + 8 + 14 * int(series.size()), {255, 255, 255});  // over the curves
  int ly = top + 8;
  for (const auto& s : series) {
    cv.rect(key_x, ly, key_x + 15, ly + 8, s.color);
    cv.text(key_x + 20, ly, s.label, ink);
    ly += 14;
  }
  if (!o.y_label.empty()) cv.text(8, top - 16, o.y_label, ink);
  write_png(path, o.width, o.height, 3, cv.px);
}

}  // namespace tessera::app
