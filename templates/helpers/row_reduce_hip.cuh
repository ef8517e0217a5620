// row_reduce: the sum (kMax: the maximum) of `v` over the kThreadsPerRow consecutive threads
// that hold one row of a row tile (a power of two). Xor-shuffles combine the row's lanes within a
// wave of 64; a row that spans several waves then adds their partials through `scratch` (one
// float per wave of the workgroup, in LDS) between two barriers, so every thread of the
// workgroup must call it. Every thread of the row gets the same value, bit for bit.
template <bool kMax, int kThreadsPerRow>
__device__ inline float row_reduce(float v, float* scratch = nullptr) {
  constexpr int kLanes = kThreadsPerRow < 64 ? kThreadsPerRow : 64;
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    float const other = __shfl_xor(v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  if constexpr (kThreadsPerRow > 64) {
    constexpr int kWaves = kThreadsPerRow / 64;  // waves per row
    int const wave = threadIdx.x / 64;
    int const first = wave / kWaves * kWaves;  // the row's first wave
    if (threadIdx.x % 64 == 0) {
      scratch[wave] = v;
    }
    __syncthreads();
    v = scratch[first];
#pragma unroll
    for (int w = 1; w < kWaves; ++w) {
      v = kMax ? fmaxf(v, scratch[first + w]) : v + scratch[first + w];
    }
    __syncthreads();  // `scratch` may be written again
  }
  return v;
}
