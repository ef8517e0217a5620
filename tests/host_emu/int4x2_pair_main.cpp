// Runs the generated code's int4x2_pair helper on the host (tests/device_helpers.rs): the
// sequential order's (int4x2_pair.cuh) or, with -DINTERLEAVED, the interleaved order's. Reads
// packed words (hex, one per line) from stdin and prints, per word, its four pairs with every bit
// but the two values' masked off, as dequant_int4x2_exact's lop3 does.
#include <cstdint>
#include <cstdio>

#define CUTE_DEVICE inline
// CUDA's __byte_perm(x, y, s): byte i of the result is byte (s >> 4i) & 7 of the eight bytes
// of y:x (x's bytes 0..3, y's 4..7).
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  uint64_t const bytes = (uint64_t(y) << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    r |= uint32_t((bytes >> (8 * ((s >> (4 * i)) & 7u))) & 0xFFu) << (8 * i);
  }
  return r;
}

#ifdef INTERLEAVED
#include "int4x2_pair_interleaved.cuh"
#else
#include "int4x2_pair.cuh"
#endif

int main() {
  unsigned u;
  while (std::scanf("%x", &u) == 1) {
    for (uint32_t p = 0; p < 4; ++p) {
      std::printf("%08x%c", int4x2_pair(u, p) & 0x000F000Fu, p == 3 ? '\n' : ' ');
    }
  }
}
