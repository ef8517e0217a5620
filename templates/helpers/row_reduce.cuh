// row_reduce: the sum (kMax: the maximum) of `v` over the kThreadsPerRow consecutive threads
// that hold one row of a row tile (a power of two). Xor-shuffles combine the row's lanes within a
// warp; a row that spans several warps then adds their partials through `scratch` (one float per
// warp of the block) between two block barriers, so every thread of the block must call it.
// Every thread of the row gets the same value, bit for bit: each step combines the same two
// operands on both sides, and the warps' partials are folded in one order.
template <bool kMax, int kThreadsPerRow>
CUTE_DEVICE float row_reduce(float v, float* scratch = nullptr) {
  constexpr int kLanes = kThreadsPerRow < 32 ? kThreadsPerRow : 32;
  CUTE_UNROLL
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    float const other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  if constexpr (kThreadsPerRow > 32) {
    constexpr int kWarps = kThreadsPerRow / 32;  // warps per row
    int const warp = threadIdx.x / 32;
    int const first = warp / kWarps * kWarps;  // the row's first warp
    if (threadIdx.x % 32 == 0) {
      scratch[warp] = v;
    }
    __syncthreads();
    v = scratch[first];
    CUTE_UNROLL
    for (int w = 1; w < kWarps; ++w) {
      v = kMax ? fmaxf(v, scratch[first + w]) : v + scratch[first + w];
    }
    __syncthreads();  // `scratch` may be written again
  }
  return v;
}
