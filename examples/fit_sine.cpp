// The smallest use of tessera's C++ API: fit y = sin(2 pi x) with a FullyFusedMLP.
// Runs on the GPU when one is present, else on the CPU reference backend.
#include <cmath>
#include <cstdio>
#include <vector>

#include <tessera/tessera.h>

int main() {
  using namespace tessera;
  const Device device = cuda_available() ? Device(DeviceKind::cuda) : Device(DeviceKind::cpu);
  // The same JSON a tiny-cuda-nn user would write.
  const Json config = parse_json(R"({
    "network": {"otype": "FullyFusedMLP", "n_neurons": 64, "n_hidden_layers": 2,
                "activation": "Tanh", "output_activation": "None"},
    "loss": {"otype": "L2"},
    "optimizer": {"otype": "Adam", "learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.99}
  })");
  auto trainer = nn::ModelTrainer::from_config(config, /*input_width=*/1, /*output_width=*/1, device);

  const size_t batch = 1000;  // any batch size works; no padding needed
  Pcg32 rng(1);
  std::vector<float> x(batch), y(batch);
  Buffer<float> in(device, batch), target(device, batch);
  for (int step = 1; step <= 1000; ++step) {
    for (size_t i = 0; i < batch; ++i) {
      x[i] = rng.next_float();
      y[i] = std::sin(6.2831853f * x[i]);
    }
    in.copy_from_host(x);
    target.copy_from_host(y);
    const float loss = trainer->training_step(in.matrix(batch, 1), target.matrix(batch, 1));
    if (step % 200 == 0) std::printf("step %4d  loss %.2e\n", step, loss);
  }
  std::vector<float> probe{0.25f};
  Buffer<float> probe_in = make_buffer(device, probe), probe_out(device, 1);
  trainer->inference(probe_in.matrix(1, 1), probe_out.matrix(1, 1));
  std::printf("f(0.25) = %.4f (exact 1.0) on %s\n", probe_out.to_host()[0], device.str().c_str());
  return 0;
}
