#pragma once
// Pinhole cameras from a field of view and back, as transforms files (camera_angle_x),
// instant-ngp's camera paths (fov in degrees) and the web viewer give them. One place for
// the conversion, so every reader agrees on it.
#include <cstdint>
#include <string>

#include "tessera/ops/nerf_types.h"

namespace tessera::nerf {

// Focal length in pixels of an image `pixels` wide (or high) seen over `fov_radians`.
float focal_length(float fov_radians, uint32_t pixels);
// The field of view (radians) that focal length in pixels covers over `pixels`.
float field_of_view(float focal, uint32_t pixels);
// A centred, undistorted camera of width x height with a vertical field of view in degrees.
ops::nerf::CameraModel camera_from_fov_y(uint32_t width, uint32_t height, float fov_y_degrees);
// The vertical field of view (degrees) of a camera.
float fov_y_degrees(const ops::nerf::CameraModel& camera);

// Checks that the lens maps rays to the image one to one out to its farthest corner (the
// radial polynomial does not fold back, a rational denominator stays positive), so every
// pixel's ray is well defined; otherwise an error naming `where`.
void check_lens_covers_image(const ops::nerf::CameraModel& camera, const std::string& where);

}  // namespace tessera::nerf
