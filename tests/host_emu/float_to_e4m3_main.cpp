// Runs the generated code's float_to_e4m3 helper on the host (tests/device_helpers.rs): reads
// f32 bit patterns (hex, one per line) from stdin, prints the E4M3 bits of each.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#define CUTE_DEVICE inline
inline uint32_t __float_as_uint(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
namespace cutlass {
struct float_e4m3_t {
  uint8_t storage;
  static float_e4m3_t bitcast(uint8_t x) { return float_e4m3_t{x}; }
};
}  // namespace cutlass

#include "float_to_e4m3.cuh"

int main() {
  unsigned u;
  while (std::scanf("%x", &u) == 1) {
    float x;
    uint32_t const v = u;
    std::memcpy(&x, &v, 4);
    std::printf("%02x\n", float_to_e4m3(x).storage);
  }
  return 0;
}
