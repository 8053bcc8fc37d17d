/* The C API from C (C99, no C++ in sight): a module's forward and backward against a
 * finite difference, a trainer fitting a function and resuming from a snapshot, NeRF's
 * default config for a budget, and errors that name the problem.
 * Usage: test_c_api DEVICE SCRATCH_DIR (exit 77: DEVICE absent). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/c_api.h"

static int failures = 0;
#define EXPECT(cond, ...)                                      \
  do {                                                         \
    if (!(cond)) {                                             \
      fprintf(stderr, "%s:%d: FAILED %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                            \
      fprintf(stderr, "\n");                                   \
      ++failures;                                              \
    }                                                          \
  } while (0)
#define OK(call) EXPECT((call) == TESSERA_OK, "%s", tessera_last_error())

static tessera_tensor host_matrix(float* data, int64_t rows, int64_t cols) {
  tessera_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = TESSERA_F32;
  t.device_kind = TESSERA_DEVICE_CPU;
  t.rank = 2;
  t.shape[0] = rows;
  t.shape[1] = cols;
  t.strides[0] = cols;
  t.strides[1] = 1;
  return t;
}

static tessera_tensor host_vector(float* data, int64_t n) {
  tessera_tensor t = host_matrix(data, n, 1);
  t.rank = 1;
  t.strides[0] = 1;
  return t;
}

static float uniform(unsigned* state) {
  *state = *state * 1664525u + 1013904223u;
  return (float)(*state >> 8) / 16777216.0f;
}

/* d(sum(out * dout)) / d(*value) by central differences of inference; value points into the
 * parameters or the input (15 outputs). */
static double central_difference(tessera_module* m, const tessera_tensor* params, const tessera_tensor* in,
                                 const tessera_tensor* out, float* value, const float* out_values,
                                 const float* dout) {
  const float h = 3e-3f, keep = *value;
  double loss[2];
  for (int side = 0; side < 2; ++side) {
    *value = keep + (side ? h : -h);
    OK(tessera_module_params_changed(m));
    OK(tessera_module_inference(m, params, in, out, NULL));
    loss[side] = 0;
    for (size_t i = 0; i < 15; ++i) loss[side] += (double)out_values[i] * dout[i];
  }
  *value = keep;
  OK(tessera_module_params_changed(m));
  return (loss[1] - loss[0]) / (2 * h);
}

static double relative_error(double fd, double analytic) { return fabs(fd - analytic) / (fabs(fd) + 1e-2); }

/* A frequency encoding feeding an MLP on the CPU: analytic gradients against central
 * differences of the loss sum(out * w). */
static void module_gradients(void) {
  const char* config =
      "{\"encoding\": {\"otype\": \"Frequency\", \"n_frequencies\": 2},"
      " \"network\": {\"otype\": \"FullyFusedMLP\", \"n_neurons\": 16, \"n_hidden_layers\": 1,"
      "  \"activation\": \"Tanh\", \"output_activation\": \"None\"}}";
  tessera_module* m = NULL;
  OK(tessera_module_create(config, 2, 3, "cpu", &m));
  if (!m) return;
  tessera_module_info info;
  OK(tessera_module_info_get(m, &info));
  EXPECT(info.n_input_dims == 2 && info.n_output_dims == 3 && info.n_params > 0, "info %u %u %llu",
         info.n_input_dims, info.n_output_dims, (unsigned long long)info.n_params);
  const size_t n = (size_t)info.n_params, batch = 5;
  float* params = calloc(n, sizeof(float));
  float* grads = calloc(n, sizeof(float));
  float x[10], out[15], dout[15], dx[10];
  unsigned rng = 7;
  for (size_t i = 0; i < 10; ++i) x[i] = uniform(&rng);
  for (size_t i = 0; i < 15; ++i) dout[i] = uniform(&rng) - 0.5f;
  tessera_tensor tp = host_vector(params, (int64_t)n), tg = host_vector(grads, (int64_t)n);
  tessera_tensor tx = host_matrix(x, batch, 2), to = host_matrix(out, batch, 3), tdo = host_matrix(dout, batch, 3),
                 tdx = host_matrix(dx, batch, 2);
  OK(tessera_module_initialize(m, &tp, 1337, NULL));
  uint64_t ctx = 0, ctx2 = 0;
  OK(tessera_module_forward(m, &tp, &tx, &to, NULL, &ctx));
  /* A second forward before the first's backward: the first context still works. */
  OK(tessera_module_forward(m, &tp, &tx, &to, NULL, &ctx2));
  EXPECT(ctx != ctx2, "contexts %llu %llu", (unsigned long long)ctx, (unsigned long long)ctx2);
  OK(tessera_module_backward(m, ctx, &tp, &tg, &tx, &tdo, &tdx, NULL));

  /* loss = sum(out * dout): central differences on a few parameters and inputs. */
  double worst = 0;
  size_t checked = 0;
  for (size_t k = 0; k < n; k += n / 7 + 1, ++checked) {
    const double err = relative_error(central_difference(m, &tp, &tx, &to, &params[k], out, dout), grads[k]);
    if (err > worst) worst = err;
  }
  for (size_t k = 0; k < 10; k += 3, ++checked) {
    const double err = relative_error(central_difference(m, &tp, &tx, &to, &x[k], out, dout), dx[k]);
    if (err > worst) worst = err;
  }
  /* fp32 differences of fp32 outputs: the worst relative error measured is ~4e-4. */
  printf("gradients: worst relative error against central differences %.2g over %zu values\n", worst, checked);
  EXPECT(worst < 2e-3, "worst relative gradient error %g over %zu values", worst, checked);

  /* Errors name the problem and cross no exception. */
  tessera_tensor bad = host_matrix(x, batch, 1);
  EXPECT(tessera_module_forward(m, &tp, &bad, &to, NULL, &ctx) == TESSERA_ERROR_INVALID_ARGUMENT, "bad shape");
  EXPECT(strstr(tessera_last_error(), "[batch, 2]") != NULL, "message: %s", tessera_last_error());
  tessera_tensor cuda_x = tx;
  cuda_x.device_kind = TESSERA_DEVICE_CUDA;
  EXPECT(tessera_module_inference(m, &tp, &cuda_x, &to, NULL) == TESSERA_ERROR_INVALID_ARGUMENT, "wrong device");
  EXPECT(strstr(tessera_last_error(), "cuda:0") != NULL, "message: %s", tessera_last_error());
  /* Second derivatives of S = sum(v * dL/dx), dL/dx = J^T dout: S is linear in dout, so
   * sum(dS/d(dout) * dout) = S = sum(v * dx), whatever the network. */
  float v[10], ddout[15], ddx[10];
  for (size_t i = 0; i < 10; ++i) v[i] = uniform(&rng) - 0.5f;
  tessera_tensor tv = host_matrix(v, batch, 2), tddout = host_matrix(ddout, batch, 3), tddx = host_matrix(ddx, batch, 2);
  OK(tessera_module_backward_backward(m, &tp, &tg, &tx, &tdo, &tv, &tddout, &tddx, NULL));
  double s_out = 0, s_in = 0;
  for (size_t i = 0; i < 15; ++i) s_out += (double)ddout[i] * dout[i];
  for (size_t i = 0; i < 10; ++i) s_in += (double)v[i] * dx[i];
  EXPECT(fabs(s_out - s_in) <= 1e-4 * (fabs(s_in) + 1e-3), "second backward: %g against %g", s_out, s_in);
  EXPECT(tessera_module_backward_backward(m, &tp, &tg, &tx, &tdo, &bad, NULL, NULL, NULL) ==
             TESSERA_ERROR_INVALID_ARGUMENT,
         "backward_backward with a bad shape");
  tessera_tensor short_params = host_vector(params, (int64_t)n - 1);
  EXPECT(tessera_module_inference(m, &short_params, &tx, &to, NULL) == TESSERA_ERROR_INVALID_ARGUMENT, "short params");
  tessera_module_destroy(m);

  tessera_module* none = NULL;
  EXPECT(tessera_module_create("{\"otype\": \"HashGird\"}", 3, 0, "cpu", &none) == TESSERA_ERROR_INVALID_ARGUMENT &&
             none == NULL,
         "unknown otype");
  EXPECT(strstr(tessera_last_error(), "HashGird") != NULL, "message: %s", tessera_last_error());
  EXPECT(tessera_module_create("{not json", 3, 0, "cpu", &none) == TESSERA_ERROR_INVALID_ARGUMENT, "bad JSON");
  EXPECT(tessera_module_create("{\"otype\": \"Identity\"}", 3, 0, "cuda:7", &none) ==
             TESSERA_ERROR_INVALID_ARGUMENT,
         "absent device");
  free(params);
  free(grads);
}

/* A hash grid + MLP trainer on `device` fits sin(6x) sin(6y) from host arrays; a snapshot
 * taken halfway resumes to the same loss as the uninterrupted run. */
static void trainer_fit(const char* device, const char* scratch) {
  const char* config =
      "{\"encoding\": {\"otype\": \"HashGrid\", \"n_levels\": 8, \"n_features_per_level\": 2,"
      "  \"log2_hashmap_size\": 14, \"base_resolution\": 4, \"per_level_scale\": 1.5},"
      " \"network\": {\"otype\": \"FullyFusedMLP\", \"n_neurons\": 64, \"n_hidden_layers\": 2,"
      "  \"activation\": \"ReLU\", \"output_activation\": \"None\"},"
      " \"optimizer\": {\"otype\": \"Adam\", \"learning_rate\": 1e-2}}";
  tessera_trainer* t = NULL;
  OK(tessera_trainer_create(config, 2, 1, device, 42, NULL, &t));
  if (!t) return;
  enum { batch = 1024 };  /* small: CI also runs this under ASan */
  static float x[batch * 2], y[batch], pred[batch];
  unsigned rng = 3;
  char path[1024];
  snprintf(path, sizeof path, "%s/c_api_trainer.snapshot", scratch);
  float first = 0, loss = 0, at_save = 0;
  for (int step = 0; step < 300; ++step) {
    for (int i = 0; i < batch; ++i) {
      x[2 * i] = uniform(&rng), x[2 * i + 1] = uniform(&rng);
      y[i] = sinf(6 * x[2 * i]) * sinf(6 * x[2 * i + 1]);
    }
    tessera_tensor tx = host_matrix(x, batch, 2), ty = host_matrix(y, batch, 1);
    OK(tessera_trainer_step(t, &tx, &ty, NULL, &loss));
    if (step == 0) first = loss;
    if (step == 149) {
      OK(tessera_trainer_save(t, path));
      at_save = loss;
    }
  }
  printf("trainer on %s: loss %g -> %g\n", device, first, loss);
  EXPECT(loss < first * 0.05f, "loss %g -> %g", first, loss);
  tessera_tensor tx = host_matrix(x, batch, 2), tp = host_matrix(pred, batch, 1);
  OK(tessera_trainer_inference(t, &tx, &tp, NULL));
  double mse = 0;
  for (int i = 0; i < batch; ++i) mse += (pred[i] - y[i]) * (double)(pred[i] - y[i]) / batch;
  EXPECT(mse < 0.02, "inference mse %g", mse);

  tessera_trainer_info info;
  OK(tessera_trainer_info_get(t, &info));
  EXPECT(info.steps == 300, "steps %llu", (unsigned long long)info.steps);
  OK(tessera_trainer_load(t, path));
  OK(tessera_trainer_info_get(t, &info));
  EXPECT(info.steps == 150 && fabsf(info.last_loss - at_save) <= 1e-6f * at_save, "resumed at %llu, loss %g vs %g",
         (unsigned long long)info.steps, info.last_loss, at_save);
  EXPECT(tessera_trainer_load(t, scratch) == TESSERA_ERROR_INVALID_ARGUMENT, "loading a folder");
  remove(path);
  tessera_trainer_destroy(t);
}

/* nerf train's default config for a budget: the hash grid takes 4 features per level from
 * 30 s, 2 below; a negative budget is an error that names it. */
static void nerf_default_config(void) {
  const char* config = NULL;
  OK(tessera_nerf_default_config(5, 0, &config));
  EXPECT(config && strstr(config, "\"n_features_per_level\":2"), "%s", config ? config : "(null)");
  OK(tessera_nerf_default_config(300, 0, &config));
  EXPECT(config && strstr(config, "\"n_features_per_level\":4"), "%s", config ? config : "(null)");
  OK(tessera_nerf_default_config(300, 1000, &config));
  EXPECT(config && strstr(config, "\"n_features_per_level\":2"), "%s", config ? config : "(null)");
  EXPECT(tessera_nerf_default_config(-1, 0, &config) != TESSERA_OK && strstr(tessera_last_error(), "seconds"), "%s",
         tessera_last_error());
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: test_c_api DEVICE SCRATCH_DIR\n");
    return 2;
  }
  if (tessera_abi_version() != TESSERA_C_ABI_VERSION) {
    fprintf(stderr, "ABI %d, header %d\n", tessera_abi_version(), TESSERA_C_ABI_VERSION);
    return 1;
  }
  if (tessera_check_device(argv[1], NULL, NULL) != TESSERA_OK) {
    printf("SKIP: %s\n", tessera_last_error());
    return 77;
  }
  const char* devices = NULL;
  OK(tessera_available_devices(&devices));
  printf("tessera %s, devices %s\n", tessera_version(), devices ? devices : "?");
  /* The machine report: JSON with the version and, per GPU, the kernels it takes. */
  const char* info = NULL;
  OK(tessera_info(&info));
  EXPECT(info && strstr(info, "\"version\"") && strstr(info, "\"cuda_devices\""), "info: %s", info ? info : "(null)");
  EXPECT(strstr(devices, "cuda:") == NULL || strstr(info, "\"kernels\""), "info has no kernels: %s", info);
  EXPECT(tessera_info(NULL) == TESSERA_ERROR_INVALID_ARGUMENT, "a null out-pointer is refused");
  if (strcmp(argv[1], "cpu") == 0) module_gradients(), nerf_default_config();
  trainer_fit(argv[1], argv[2]);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else printf("all passed on %s\n", argv[1]);
  return failures ? 1 : 0;
}
