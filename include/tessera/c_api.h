/* tessera's C API (C99): what Python (ctypes), other languages and plugins call. Built
 * into libtessera.so, which exports only the tessera_* symbols below and carries the CUDA
 * runtime inside, so one build serves every Python and every PyTorch.
 *
 * Conventions
 * - Every call returns a tessera_status; on anything but TESSERA_OK, tessera_last_error()
 *   gives this thread's message. No C++ exception crosses this interface.
 * - Handles are opaque; each *_create has its *_destroy (null is a no-op).
 * - Arrays are the caller's: a tessera_tensor names memory, element type, device and shape.
 *   Matrices are row-major [rows, cols] with a row stride (elements) >= cols and column
 *   stride 1. Memory on the handle's device is used in place; trainers and NeRF sessions
 *   on a GPU also take host arrays (device TESSERA_DEVICE_CPU) and stage them.
 * - `stream` is the native stream the work is queued on (CUDA: a cudaStream_t of the
 *   handle's device, e.g. PyTorch's current stream; null: the device's default stream;
 *   CPU: null). Results are in that stream's order.
 * - Strings returned through `const char**` live in thread-local storage until the next
 *   call on the same thread that returns a string.
 */
#ifndef TESSERA_C_API_H
#define TESSERA_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TESSERA_C_EXPORT __declspec(dllexport)
#else
#define TESSERA_C_EXPORT __attribute__((visibility("default")))
#endif

/* Bumped when a signature or struct below changes incompatibly. */
#define TESSERA_C_ABI_VERSION 1

typedef enum tessera_status {
  TESSERA_OK = 0,
  TESSERA_ERROR_INVALID_ARGUMENT = 1, /* a bad shape, dtype, device, config or file */
  TESSERA_ERROR_RUNTIME = 2,          /* the device or the system failed */
  TESSERA_ERROR_OUT_OF_MEMORY = 3
} tessera_status;

typedef enum tessera_dtype {
  TESSERA_F32 = 0,
  TESSERA_F16 = 1,
  TESSERA_BF16 = 2,
  TESSERA_U32 = 3,
  TESSERA_U8 = 4
} tessera_dtype;

typedef enum tessera_device_kind { TESSERA_DEVICE_CPU = 0, TESSERA_DEVICE_CUDA = 1, TESSERA_DEVICE_OPENCL = 2 } tessera_device_kind;

typedef struct tessera_tensor {
  void* data;
  int32_t dtype;        /* tessera_dtype */
  int32_t device_kind;  /* tessera_device_kind */
  int32_t device_index;
  int32_t rank;         /* 1 (a vector) or 2 (a matrix) */
  int64_t shape[2];
  int64_t strides[2];   /* in elements */
} tessera_tensor;

typedef struct tessera_module tessera_module;
typedef struct tessera_trainer tessera_trainer;
typedef struct tessera_nerf tessera_nerf;

/* --- the library --------------------------------------------------------------- */
TESSERA_C_EXPORT const char* tessera_last_error(void);
TESSERA_C_EXPORT int tessera_abi_version(void);
TESSERA_C_EXPORT const char* tessera_version(void);
/* "cpu,cuda:0,...": every device this build and machine can run on. */
TESSERA_C_EXPORT tessera_status tessera_available_devices(const char** devices);
/* What this build and machine have, as `tessera info --json` writes it: a JSON object with
 * the version, backends, CUDA architectures, each GPU with the code it runs and the kernel
 * each op takes on it, and the OpenCL devices. */
TESSERA_C_EXPORT tessera_status tessera_info(const char** info_json);
/* Parses and checks a device name ("cpu", "cuda", "cuda:1"); kind and index may be null. */
TESSERA_C_EXPORT tessera_status tessera_check_device(const char* device, int32_t* kind, int32_t* index);
/* Waits for every queued piece of work of the device. */
TESSERA_C_EXPORT tessera_status tessera_synchronize(const char* device);

/* --- modules: one differentiable piece on caller-owned parameters ----------------
 * config_json: a module config ({"otype": "HashGrid", ...}, {"otype": "Sequential",
 * "modules": [...]}) or tiny-cuda-nn's model layout {"encoding": ..., "network": ...};
 * n_output_dims: the network's output width (0 where the config gives it, e.g. an encoding).
 * Parameters are one fp32 vector [n_params] in tiny-cuda-nn's layout (every network matrix
 * first, then the encoding tables), on the module's device, passed to each call. */
typedef struct tessera_module_info {
  uint32_t n_input_dims, n_output_dims;
  uint64_t n_params, n_matrix_params;
  int32_t device_kind, device_index;
} tessera_module_info;

TESSERA_C_EXPORT tessera_status tessera_module_create(const char* config_json, uint32_t n_input_dims,
                                                      uint32_t n_output_dims, const char* device,
                                                      tessera_module** module);
TESSERA_C_EXPORT void tessera_module_destroy(tessera_module* module);
TESSERA_C_EXPORT tessera_status tessera_module_info_get(const tessera_module* module, tessera_module_info* info);
/* The module config that builds this module again (defaults filled in). */
TESSERA_C_EXPORT tessera_status tessera_module_config(const tessera_module* module, const char** config_json);
/* Writes the initial parameters for `seed` into params (fp32 [n_params]). */
TESSERA_C_EXPORT tessera_status tessera_module_initialize(tessera_module* module, const tessera_tensor* params,
                                                          uint64_t seed, void* stream);
/* Call after the values in the parameter array changed (an optimizer step): the module
 * refreshes what it derives from them (the fp16 copy tensor cores read) before its next use.
 * A different params pointer than the last call's is noticed without this. */
TESSERA_C_EXPORT tessera_status tessera_module_params_changed(tessera_module* module);
/* out [batch, n_output_dims] = f(in [batch, n_input_dims]); fp32. */
TESSERA_C_EXPORT tessera_status tessera_module_inference(tessera_module* module, const tessera_tensor* params,
                                                         const tessera_tensor* in, const tessera_tensor* out,
                                                         void* stream);
/* The same, keeping what backward needs; *context names it for tessera_module_backward.
 * Contexts stay usable after later forwards of the same module (the module recomputes the
 * forward for an older one), as autograd needs when a module runs twice in one graph. */
TESSERA_C_EXPORT tessera_status tessera_module_forward(tessera_module* module, const tessera_tensor* params,
                                                       const tessera_tensor* in, const tessera_tensor* out,
                                                       void* stream, uint64_t* context);
/* Parameter gradients into grads (overwritten; fp32 [n_params]) and, when dL_din is not
 * null, dL/d(in) [batch, n_input_dims]. in: the forward's input. */
TESSERA_C_EXPORT tessera_status tessera_module_backward(tessera_module* module, uint64_t context,
                                                        const tessera_tensor* params, const tessera_tensor* grads,
                                                        const tessera_tensor* in, const tessera_tensor* dL_dout,
                                                        const tessera_tensor* dL_din, void* stream);

/* Second derivatives through the input gradient (tiny-cuda-nn's backward_backward_input):
 * dL_ddLdin [batch, n_input_dims] is the gradient of a loss on the dL/d(in) that
 * tessera_module_backward gives for (in, dL_dout). Writes the parameter gradients into grads
 * (overwritten) and, where not null, dL/d(dL_dout) [batch, n_output_dims] and the
 * second-order dL/d(in) [batch, n_input_dims]. Grid encodings have it; other modules return
 * TESSERA_ERROR_INVALID_ARGUMENT saying so. */
TESSERA_C_EXPORT tessera_status tessera_module_backward_backward(tessera_module* module, const tessera_tensor* params,
                                                                 const tessera_tensor* grads, const tessera_tensor* in,
                                                                 const tessera_tensor* dL_dout,
                                                                 const tessera_tensor* dL_ddLdin,
                                                                 const tessera_tensor* dL_ddLdout,
                                                                 const tessera_tensor* dL_din, void* stream);

/* --- trainers: model + loss + optimizer, one fused step -------------------------
 * config_json: {"encoding"?, "network", "loss"?, "optimizer"?} (tiny-cuda-nn's layout) or
 * {"model": <module config>, "loss"?, "optimizer"?}. params: null (the trainer owns its
 * parameters, initialized from `seed`), or a caller-owned fp32 [n_params] array on the
 * trainer's device that the trainer trains in place (its values are the starting point). */
typedef struct tessera_trainer_info {
  uint32_t n_input_dims, n_output_dims;
  uint64_t n_params;
  uint64_t steps;          /* optimizer steps taken */
  uint32_t skipped_steps;  /* steps skipped for non-finite gradients */
  float loss_scale;
  float last_loss;
  int32_t device_kind, device_index;
} tessera_trainer_info;

TESSERA_C_EXPORT tessera_status tessera_trainer_create(const char* config_json, uint32_t n_input_dims,
                                                       uint32_t n_output_dims, const char* device, uint64_t seed,
                                                       const tessera_tensor* params, tessera_trainer** trainer);
TESSERA_C_EXPORT void tessera_trainer_destroy(tessera_trainer* trainer);
/* Waits for the trainer's queued work (the info of the latest step). */
TESSERA_C_EXPORT tessera_status tessera_trainer_info_get(tessera_trainer* trainer, tessera_trainer_info* info);
/* {"model", "loss", "optimizer"}: builds the same trainer again. */
TESSERA_C_EXPORT tessera_status tessera_trainer_config(const tessera_trainer* trainer, const char** config_json);
/* One step on in [batch, n_input_dims] and target [batch, n_output_dims] (fp32). loss: null
 * queues the step and returns; else waits and writes the step's mean loss. */
TESSERA_C_EXPORT tessera_status tessera_trainer_step(tessera_trainer* trainer, const tessera_tensor* in,
                                                     const tessera_tensor* target, void* stream, float* loss);
TESSERA_C_EXPORT tessera_status tessera_trainer_inference(tessera_trainer* trainer, const tessera_tensor* in,
                                                          const tessera_tensor* out, void* stream);
/* Copies the parameters out (fp32 [n_params], any device or the host) or in. */
TESSERA_C_EXPORT tessera_status tessera_trainer_get_params(tessera_trainer* trainer, const tessera_tensor* params);
TESSERA_C_EXPORT tessera_status tessera_trainer_set_params(tessera_trainer* trainer, const tessera_tensor* params);
/* Call after caller-owned parameters were changed other than by this trainer. */
TESSERA_C_EXPORT tessera_status tessera_trainer_params_changed(tessera_trainer* trainer);
TESSERA_C_EXPORT tessera_status tessera_trainer_set_loss_scale(tessera_trainer* trainer, float loss_scale);
/* How much of the caller's training budget is spent, 0 to 1 (larger values count as 1): an
   optimizer schedule tied to the budget ("BudgetDecay") follows it; others pass it over. */
TESSERA_C_EXPORT tessera_status tessera_trainer_set_progress(tessera_trainer* trainer, double fraction);
/* Snapshots (model, optimizer state, counters; atomically written, verified on load). */
TESSERA_C_EXPORT tessera_status tessera_trainer_save(tessera_trainer* trainer, const char* path);
TESSERA_C_EXPORT tessera_status tessera_trainer_load(tessera_trainer* trainer, const char* path);

/* --- NeRF: train a scene, evaluate, render, save / resume, extract a mesh ----------
 * scene: a folder (transforms_<split>.json, transforms.json, a COLMAP sparse model, LLFF's
 * poses_bounds.npy) or a transforms file, as `tessera nerf train` takes it; holdout: for a
 * scene without split files, every holdout-th frame (of those whose image exists) is the test
 * split (0: none; `nerf train` uses 8). config_json: null for the default config with its
 * short-budget grid; tessera_nerf_default_config gives `nerf train`'s config for a budget. */
typedef struct tessera_nerf_info {
  uint64_t steps;
  double train_seconds;
  float last_loss;
  uint32_t rays_per_step;
  uint32_t n_train_frames; /* 0 for a snapshot loaded only to render */
  uint32_t aabb_scale;
  uint32_t width, height;  /* the training camera's */
  float fl_x, fl_y;
  int32_t device_kind, device_index;
} tessera_nerf_info;

/* Where a training run stands, for a progress callback. */
typedef struct tessera_nerf_progress {
  uint64_t step;
  double train_seconds;
  float loss;
  double steps_per_second;
} tessera_nerf_progress;
/* Returns non-zero to stop the run. */
typedef int (*tessera_nerf_callback)(const tessera_nerf_progress* progress, void* user);

typedef struct tessera_mesh {
  uint64_t n_vertices, n_triangles;
  const float* positions;     /* [n_vertices, 3], the scene's coordinates */
  const float* normals;       /* [n_vertices, 3] */
  const uint8_t* colours;     /* [n_vertices, 3] sRGB, null when not asked for */
  const uint32_t* triangles;  /* [n_triangles, 3] */
} tessera_mesh;

/* The default NeRF config for a training budget (0: no limit of that kind), as `nerf train`
 * picks it: the hash grid takes 4 features per level instead of 2 when every given limit is
 * at least 30 s / 15000 steps, with its finest level at 1448 cells per unit instead of 2048;
 * Adam's learning rate is 1e-2 instead of 2e-2 when every given limit is at least 300 s /
 * 150000 steps. */
TESSERA_C_EXPORT tessera_status tessera_nerf_default_config(double seconds, uint64_t steps, const char** config_json);
TESSERA_C_EXPORT tessera_status tessera_nerf_create(const char* scene, const char* config_json, const char* device,
                                                    uint64_t seed, uint32_t holdout, tessera_nerf** nerf);
/* A snapshot; with a scene, training resumes on it (its run record kept), else the NeRF
 * only renders and extracts meshes. */
TESSERA_C_EXPORT tessera_status tessera_nerf_load(const char* snapshot, const char* scene, uint32_t holdout,
                                                  const char* device, tessera_nerf** nerf);
TESSERA_C_EXPORT void tessera_nerf_destroy(tessera_nerf* nerf);
TESSERA_C_EXPORT tessera_status tessera_nerf_info_get(tessera_nerf* nerf, tessera_nerf_info* info);
/* Trains for `seconds` more of training time and/or `steps` more steps (0: no budget of that
 * kind; one must be set), calling `callback` (may be null) every callback_every steps. */
TESSERA_C_EXPORT tessera_status tessera_nerf_train(tessera_nerf* nerf, double seconds, uint64_t steps,
                                                   uint32_t callback_every, tessera_nerf_callback callback,
                                                   void* user);
/* Test-split quality as JSON: {"psnr_white", "psnr_black_linear", "ssim_white",
 * "ssim_black_linear", "views"} (both protocols: docs in nerf/evaluate.h). max_views 0: all. */
TESSERA_C_EXPORT tessera_status tessera_nerf_evaluate(tessera_nerf* nerf, uint32_t max_views,
                                                      const char** result_json);
/* Renders a camera: transform_matrix is camera-to-world [4, 4] row-major in the scene's
 * (transforms.json, OpenGL-camera) convention; fov_x_degrees <= 0 takes the training
 * camera's; background linear RGB. rgba: host float [height, width, 4], colour over the
 * background (sRGB) and opacity. */
TESSERA_C_EXPORT tessera_status tessera_nerf_render(tessera_nerf* nerf, const float* transform_matrix,
                                                    uint32_t width, uint32_t height, float fov_x_degrees,
                                                    const float* background, float* rgba);
/* A snapshot that `tessera nerf render|eval` and tessera_nerf_load read (atomically written). */
TESSERA_C_EXPORT tessera_status tessera_nerf_save(tessera_nerf* nerf, const char* path);
/* The isosurface density = threshold on a resolution^3 lattice; arrays valid until the next
 * mesh of this NeRF or its destroy. */
TESSERA_C_EXPORT tessera_status tessera_nerf_mesh(tessera_nerf* nerf, uint32_t resolution, float threshold,
                                                  int colours, tessera_mesh* mesh);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_C_API_H */
