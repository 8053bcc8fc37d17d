// Prepended to every OpenCL program of the op table (opencl_ops.h: program_kernel):
// a work-group sum (where WG is defined), the activations (the Activation enum's values, chosen at build time by -DACT) and the
// TrainState with its settle step, both mirroring the C++ definitions
// (src/ops/activation_math.h, src/ops/step_math.h) so every backend computes the same.
#ifndef ACT
#define ACT 0
#endif

// fp16 and bf16 storage with fp32 arithmetic on every device: vload_half / vstore_half_rte
// need no cl_khr_fp16 (only half arithmetic does); bf16 is the high half of an fp32's bits,
// rounded to nearest even when stored. A kernel names each operand's storage with -DX_TYPE
// (0 fp32, 1 fp16, 2 bf16) and declares it through STORAGE_T / LOAD / STORE below.
float load_bf16(__global const ushort* p, ulong i) { return as_float((uint)p[i] << 16); }
float4 load4_bf16(__global const ushort* p) { return as_float4(convert_uint4(vload4(0, p)) << 16); }
void store_bf16(float v, __global ushort* p, ulong i) {
  const uint u = as_uint(v);
  p[i] = isnan(v) ? (ushort)0x7fc0 : (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// The activations by their enum value `a` (constant-folded where a is a build-time define).
float activation_value_of(int a, float z) {
  switch (a) {
    case 1: return z > 0.0f ? z : 0.0f;
    case 2: return z > 0.0f ? z : 0.01f * z;
    case 3: return 1.0f / (1.0f + exp(-z));
    case 4: return tanh(z);
    case 5: return z > 15.0f ? z : log1p(exp(z));
    case 6: return exp(z);
    case 7: return z / (1.0f + exp(-z));
    case 8: return sin(z);
    default: return z;
  }
}

// dy/dz from the output y (and the input z for SiLU and Sine).
float activation_derivative_of(int a, float y, float z) {
  switch (a) {
    case 1: return y > 0.0f ? 1.0f : 0.0f;
    case 2: return y > 0.0f ? 1.0f : 0.01f;
    case 3: return y * (1.0f - y);
    case 4: return 1.0f - y * y;
    case 5: return 1.0f - exp(-y);
    case 6: return y;
    case 7: {
      const float s = 1.0f / (1.0f + exp(-z));
      return s * (1.0f + z * (1.0f - s));
    }
    case 8: return cos(z);
    default: return 1.0f;
  }
}

// d2y/dz2 from y and z (the MLP's second backward); zero for the piecewise-linear ones.
float activation_second_derivative_of(int a, float y, float z) {
  switch (a) {
    case 3: return y * (1.0f - y) * (1.0f - 2.0f * y);
    case 4: return -2.0f * y * (1.0f - y * y);
    case 5: {
      const float s = 1.0f - exp(-y);
      return s * (1.0f - s);
    }
    case 6: return y;
    case 7: {
      const float s = 1.0f / (1.0f + exp(-z));
      return s * (1.0f - s) * (2.0f + z * (1.0f - 2.0f * s));
    }
    case 8: return -y;
    default: return 0.0f;
  }
}

// The activation chosen at build time by -DACT.
float activate(float z) { return activation_value_of(ACT, z); }
float activation_derivative(float y, float z) { return activation_derivative_of(ACT, y, z); }

typedef struct {
  float loss_scale;
  float applied_loss_scale;
  uint good_steps;
  uint skipped_steps;
  uint skip_this_step;
  uint optimizer_steps;
  float last_loss;
  uint nonfinite_flag;
  uint blocks_done;
} TrainState;

// The TrainState at a byte offset of a buffer (views of its bytes may start anywhere 4-aligned).
__global TrainState* train_state(__global uchar* base, ulong offset) { return (__global TrainState*)(base + offset); }

#ifdef WG
// The local-memory tree sum of each item's v over a 1-D work-group of WG items (a power of
// two); every item gets the total. Ends with a barrier so `red` can be reused at once.
float group_sum(__local float* red, float v) {
  const int lid = get_local_id(0);
  red[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int o = WG / 2; o > 0; o >>= 1) {
    if (lid < o) red[lid] += red[lid + o];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float total = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return total;
}
#endif

#define MIN_LOSS_SCALE (1.0f / 1024.0f)
#define MAX_LOSS_SCALE 32768.0f
#define LOSS_SCALE_GROWTH_INTERVAL 1000u

void finish_step(__global TrainState* s, bool finite) {
  s->applied_loss_scale = s->loss_scale;
  s->skip_this_step = finite ? 0u : 1u;
  if (!finite) {
    ++s->skipped_steps;
    s->good_steps = 0;
    s->loss_scale = fmax(s->loss_scale * 0.5f, MIN_LOSS_SCALE);
  } else {
    ++s->optimizer_steps;
    if (++s->good_steps >= LOSS_SCALE_GROWTH_INTERVAL) {
      s->good_steps = 0;
      s->loss_scale = fmin(s->loss_scale * 2.0f, MAX_LOSS_SCALE);
    }
  }
}
