// A COLMAP sparse model as a transforms.json: camera-to-world poses in NeRF's convention,
// oriented and scaled the way instant-ngp's colmap2nerf does it, aabb_scale from the points.
#include <algorithm>
#include <cmath>
#include <map>

#include "tessera/core/error.h"
#include "tessera/nerf/colmap.h"

namespace tessera::nerf {

namespace {

using Vec = std::array<double, 3>;
using Mat = std::array<Vec, 3>;  // rows

Vec operator-(Vec a, Vec b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }
Vec operator+(Vec a, Vec b) { return {a[0] + b[0], a[1] + b[1], a[2] + b[2]}; }
Vec operator*(double s, Vec a) { return {s * a[0], s * a[1], s * a[2]}; }
double dot(Vec a, Vec b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
Vec cross(Vec a, Vec b) { return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]}; }
double norm(Vec a) { return std::sqrt(dot(a, a)); }
Vec times(const Mat& m, Vec v) { return {dot(m[0], v), dot(m[1], v), dot(m[2], v)}; }
Mat times(const Mat& a, const Mat& b) {
  Mat r{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r[i][j] = a[i][0] * b[0][j] + a[i][1] * b[1][j] + a[i][2] * b[2][j];
  return r;
}
Mat transpose(const Mat& m) {
  Mat r{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r[i][j] = m[j][i];
  return r;
}

Mat quaternion_rotation(const double q[4]) {
  const double n = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  const double w = q[0] / n, x = q[1] / n, y = q[2] / n, z = q[3] / n;
  return {{{1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)},
           {2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)},
           {2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)}}};
}

// The rotation taking unit vector a onto unit vector b (Rodrigues; a half turn about a
// perpendicular axis when they are opposite).
Mat rotation_between(Vec a, Vec b) {
  const Vec v = cross(a, b);
  const double c = dot(a, b), s2 = dot(v, v);
  if (s2 < 1e-20) {
    if (c > 0) return {{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}};
    Vec axis = cross(a, std::fabs(a[0]) < 0.9 ? Vec{1, 0, 0} : Vec{0, 1, 0});
    axis = (1 / norm(axis)) * axis;
    Mat r{};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) r[i][j] = 2 * axis[i] * axis[j] - (i == j ? 1 : 0);
    return r;
  }
  const Mat k{{{0, -v[2], v[1]}, {v[2], 0, -v[0]}, {-v[1], v[0], 0}}};
  const Mat k2 = times(k, k);
  Mat r{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r[i][j] = (i == j ? 1 : 0) + k[i][j] + k2[i][j] * (1 - c) / s2;
  return r;
}

struct Pose {
  Mat rotation;  // camera-to-world, columns: right, up, back (NeRF/OpenGL camera)
  Vec position;
};

// The point where two cameras' optical axes pass closest, taken only in front of both,
// and the weight colmap2nerf gives it (sin^2 of the angle between the axes).
Vec closest_point(const Pose& a, const Pose& b, double& weight) {
  const Vec da = -1.0 * Vec{a.rotation[0][2], a.rotation[1][2], a.rotation[2][2]};  // forward
  const Vec db = -1.0 * Vec{b.rotation[0][2], b.rotation[1][2], b.rotation[2][2]};
  const Vec c = cross(da, db);
  weight = dot(c, c);
  const Vec t = b.position - a.position;
  const double ta = std::max(0.0, dot(cross(t, db), c) / (weight + 1e-10));
  const double tb = std::max(0.0, dot(cross(t, da), c) / (weight + 1e-10));
  return 0.5 * ((a.position + ta * da) + (b.position + tb * db));
}

// What the cameras look at: the weighted mean of their axes' closest points (over at most
// ~1000 evenly spread cameras: the pairs grow as their square).
Vec centre_of_attention(const std::vector<Pose>& poses) {
  Vec sum{0, 0, 0};
  double total = 0;
  const size_t stride = (poses.size() + 999) / 1000;
  for (size_t i = 0; i < poses.size(); i += stride)
    for (size_t j = i + stride; j < poses.size(); j += stride) {
      double w;
      const Vec p = closest_point(poses[i], poses[j], w);
      if (w > 1e-5) sum = sum + w * p, total += w;
    }
  if (total > 0) return (1 / total) * sum;
  Vec mean{0, 0, 0};  // all axes parallel: the cameras' centroid
  for (const Pose& p : poses) mean = mean + (1.0 / double(poses.size())) * p.position;
  return mean;
}

// Transforms-file keys of one camera; COLMAP names that instant-ngp and nerfstudio do not
// know are written as the OpenCV model they are a case of.
Json camera_keys(const ColmapCamera& cam) {
  const ops::nerf::CameraModel c = colmap_camera(cam);
  std::string model = cam.model;
  if (model == "SIMPLE_RADIAL" || model == "RADIAL") model = "OPENCV";
  if (model == "SIMPLE_RADIAL_FISHEYE" || model == "RADIAL_FISHEYE") model = "OPENCV_FISHEYE";
  Json j{{"camera_model", model}, {"fl_x", c.fl_x}, {"fl_y", c.fl_y}, {"cx", c.cx}, {"cy", c.cy},
         {"w", c.width},          {"h", c.height},  {"k1", c.k1},     {"k2", c.k2}, {"k3", c.k3},
         {"k4", c.k4},            {"p1", c.p1},     {"p2", c.p2},     {"is_fisheye", c.lens == ops::nerf::Lens::fisheye}};
  if (model == "FULL_OPENCV") j["k5"] = c.k5, j["k6"] = c.k6;
  return j;
}

Json matrix_json(const Pose& p) {
  Json m = Json::array();
  for (int i = 0; i < 3; ++i) m.push_back({p.rotation[i][0], p.rotation[i][1], p.rotation[i][2], p.position[i]});
  m.push_back({0.0, 0.0, 0.0, 1.0});
  return m;
}

// The smallest power of two (1 to 128) whose box, at instant-ngp's 0.33 scale about the
// cube's centre, holds 95% of the points; 16 without points.
uint32_t aabb_scale_for(const std::vector<Vec>& points, double scale, Vec centre) {
  if (points.empty()) return 16;
  std::vector<double> extent;
  extent.reserve(points.size());
  for (const Vec& p : points) {
    const Vec q = scale * (p - centre);
    extent.push_back(2 * std::max({std::fabs(q[0]), std::fabs(q[1]), std::fabs(q[2])}));
  }
  const size_t k = std::min(extent.size() - 1, size_t(0.95 * double(extent.size())));
  std::nth_element(extent.begin(), extent.begin() + long(k), extent.end());
  uint32_t s = 1;
  while (s < 128 && double(s) < extent[k]) s *= 2;
  return s;
}

}  // namespace

ConvertedScene colmap_to_transforms(const ColmapModel& model, const ColmapConversion& o) {
  TESSERA_CHECK(!model.images.empty(), "the COLMAP model has no registered images");
  TESSERA_CHECK(o.aabb_scale == 0 || (o.aabb_scale <= 128 && (o.aabb_scale & (o.aabb_scale - 1)) == 0),
                "aabb_scale {} must be a power of two from 1 to 128", o.aabb_scale);
  std::vector<const ColmapImage*> images;
  for (const ColmapImage& im : model.images) images.push_back(&im);
  std::sort(images.begin(), images.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::map<uint32_t, const ColmapCamera*> cameras;
  for (const ColmapCamera& c : model.cameras) cameras[c.id] = &c;
  bool shared_camera = true;
  for (const ColmapImage* im : images) shared_camera = shared_camera && im->camera_id == images[0]->camera_id;

  // World-to-camera (OpenCV camera: +y down, +z forward) to camera-to-world (OpenGL camera).
  std::vector<Pose> poses;
  for (const ColmapImage* im : images) {
    const Mat r = transpose(quaternion_rotation(im->qvec));
    Pose p;
    p.position = -1.0 * times(r, Vec{im->tvec[0], im->tvec[1], im->tvec[2]});
    p.rotation = r;
    for (int i = 0; i < 3; ++i) p.rotation[i][1] = -r[i][1], p.rotation[i][2] = -r[i][2];
    poses.push_back(p);
  }
  std::vector<Vec> points;
  for (const ColmapPoint& p : model.points) points.push_back({p.xyz[0], p.xyz[1], p.xyz[2]});

  // Up to +z: the cameras' mean up vector (colmap2nerf's choice: a capture is mostly upright).
  Mat align{{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}};
  if (!o.keep_colmap_coords) {
    Vec up{0, 0, 0};
    for (const Pose& p : poses) up = up + Vec{p.rotation[0][1], p.rotation[1][1], p.rotation[2][1]};
    if (norm(up) > 1e-9) align = rotation_between((1 / norm(up)) * up, {0, 0, 1});
    for (Pose& p : poses) p.rotation = times(align, p.rotation), p.position = times(align, p.position);
    for (Vec& p : points) p = times(align, p);
  }
  const Vec centre = centre_of_attention(poses);
  double mean_distance = 0;
  for (const Pose& p : poses) mean_distance += norm(p.position - centre) / double(poses.size());
  // NeRF-synthetic's size: cameras ~4 units from the centre (0.33 * 4 in the unit cube).
  const double scale = mean_distance > 1e-9 ? 4.0 / mean_distance : 1.0;

  ConvertedScene out;
  Json& t = out.transforms;
  t = Json::object();
  if (shared_camera) t.update(camera_keys(*cameras.at(images[0]->camera_id)));
  if (o.keep_colmap_coords) {
    // Poses stay in COLMAP's world; instant-ngp's scale and offset fit it into the box.
    t["scale"] = 0.33 * scale;
    t["offset"] = {0.5 - 0.33 * scale * centre[0], 0.5 - 0.33 * scale * centre[1], 0.5 - 0.33 * scale * centre[2]};
  } else {
    for (Pose& p : poses) p.position = scale * (p.position - centre);
    for (Vec& p : points) p = scale * (p - centre);
  }
  const Vec points_centre = o.keep_colmap_coords ? centre : Vec{0, 0, 0};
  const double points_scale = 0.33 * (o.keep_colmap_coords ? scale : 1.0);
  t["aabb_scale"] = o.aabb_scale ? o.aabb_scale : aabb_scale_for(points, points_scale, points_centre);
  Json frames = Json::array();
  for (size_t i = 0; i < images.size(); ++i) {
    Json f{{"file_path", o.image_prefix + images[i]->name}, {"transform_matrix", matrix_json(poses[i])},
           {"colmap_im_id", images[i]->id}};
    if (!shared_camera) f.update(camera_keys(*cameras.at(images[i]->camera_id)));
    frames.push_back(std::move(f));
  }
  t["frames"] = std::move(frames);
  for (size_t i = 0; i < points.size(); ++i) {
    out.points.push_back({float(points[i][0]), float(points[i][1]), float(points[i][2])});
    out.colours.push_back({model.points[i].rgb[0], model.points[i].rgb[1], model.points[i].rgb[2]});
  }
  return out;
}

void write_point_cloud(const std::string& path, const std::vector<std::array<float, 3>>& points,
                       const std::vector<std::array<uint8_t, 3>>& colours) {
  TESSERA_CHECK(points.size() == colours.size(), "write_point_cloud: {} points but {} colours", points.size(),
                colours.size());
  std::string bytes = fmt::format(
      "ply\nformat binary_little_endian 1.0\nelement vertex {}\nproperty float x\nproperty float y\n"
      "property float z\nproperty uchar red\nproperty uchar green\nproperty uchar blue\nend_header\n",
      points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    bytes.append(reinterpret_cast<const char*>(points[i].data()), 12);
    bytes.append(reinterpret_cast<const char*>(colours[i].data()), 3);
  }
  write_file_atomic(path, bytes);
}

}  // namespace tessera::nerf
