#pragma once
// Rendering a trained NeRF along a list of cameras to numbered PNG frames (a video's frames):
// PNG encoding (~150 ms for 800x800) would dwarf a GPU rendering (~17 ms), so frames are
// written by worker threads while the next ones render, a few in flight per core.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "tessera/core/config.h"
#include "tessera/nerf/trainer.h"

namespace tessera::nerf {

// The cameras of a transforms file, one per frame, at width x height when given (else the
// file's size, else `fallback`'s); intrinsics from the file, centred where it gives none.
std::vector<FrameView> cameras_from_transforms(const Json& transforms, const std::string& name, uint32_t width,
                                               uint32_t height, const CameraModel& fallback);

// The same field of view at another size (width and height both given), centred.
CameraModel resized_camera(CameraModel camera, uint32_t width, uint32_t height);

struct RenderStats {
  std::vector<double> render_ms;  // per frame, the rendering alone (PNG writing excluded)
  double seconds = 0;             // everything, the PNGs included
};

// Renders cameras[i] over `background` (linear RGB) to folder/frame_%04d.png, after removing
// the folder's earlier frame_*.png (an earlier, longer run's would join the video);
// `progress(done)` after each frame. Several trainers (the same model on several devices)
// share the frames out, each rendering the next one not taken; the files are numbered by
// camera whichever renders them.
RenderStats render_frames(const std::vector<NerfTrainer*>& trainers, const std::vector<FrameView>& cameras,
                          Vec3 background, const std::string& folder,
                          const std::function<void(size_t done)>& progress = {});

}  // namespace tessera::nerf
