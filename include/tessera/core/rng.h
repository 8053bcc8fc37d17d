#pragma once
// PCG32 (O'Neill 2014, XSH-RR variant): small, fast, reproducible across platforms.
#include <cmath>
#include <cstdint>

namespace tessera {

class Pcg32 {
 public:
  explicit Pcg32(uint64_t seed = 0x853c49e6748fea9bULL, uint64_t stream = 0xda3e39cb94b95bdbULL) {
    state_ = 0;
    inc_ = (stream << 1u) | 1u;
    next_uint();
    state_ += seed;
    next_uint();
  }
  uint32_t next_uint() {
    uint64_t old = state_;
    state_ = old * 6364136223846793005ULL + inc_;
    uint32_t xorshifted = static_cast<uint32_t>(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = static_cast<uint32_t>(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
  }
  // Uniform in [0, 1).
  float next_float() { return static_cast<float>(next_uint() >> 8) * (1.0f / 16777216.0f); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * next_float(); }
  // Standard normal via Box-Muller.
  float normal() {
    float u1 = std::fmax(next_float(), 1e-7f), u2 = next_float();
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
  }

  // The generator's position, so a resumed run continues the same sequence.
  struct State {
    uint64_t state, inc;
  };
  State position() const { return {state_, inc_}; }
  void set_position(const State& p) { state_ = p.state, inc_ = p.inc | 1u; }

 private:
  uint64_t state_, inc_;
};

}  // namespace tessera
