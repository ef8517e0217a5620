// A CPU emulation of the subset of HIP and composable_kernel that tilegen's AMD tile lowering
// emits (tests only; see tests/amd_emulation.rs). Each workgroup runs as one OS thread per
// GPU thread, one workgroup at a time, so `__shared__` arrays become function statics;
// __syncthreads() is a barrier of the workgroup's threads; __shfl_xor and an MFMA are
// barriers of the 64 lanes of a wave that trade values. The MFMA is computed from the
// instruction's documented lane layout (lane l gives row l % 16 of A and column l % 16 of
// B, 4 k values from 4 * (l / 16); it gets D[4 * (l / 16) + i][l % 16]). Global memory is
// host memory.
#pragma once

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)
#define __shared__ alignas(16) static

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace ck {
using index_t = int32_t;
using bhalf_t = uint16_t;  // a bf16 bit pattern, as in CK
using half_t = _Float16;
typedef uint16_t bhalf4_t __attribute__((vector_size(8)));
typedef _Float16 half4_t __attribute__((vector_size(8)));
typedef float float4_t __attribute__((vector_size(16)));

template <typename T, int N>
struct vector_type {
  typedef T type __attribute__((vector_size(sizeof(T) * N)));
};

inline float bf16_to_float(uint16_t x) {
  uint32_t const u = uint32_t(x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, as CK's type_convert with CK_USE_RNE_BF16_CONVERSION.
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

template <typename Y, typename X>
inline Y type_convert(X x);
template <> inline float type_convert<float, uint16_t>(uint16_t x) { return bf16_to_float(x); }
template <> inline uint16_t type_convert<uint16_t, float>(float x) { return float_to_bf16(x); }
template <> inline float type_convert<float, _Float16>(_Float16 x) { return float(x); }
template <> inline _Float16 type_convert<_Float16, float>(float x) { return _Float16(x); }
template <> inline float type_convert<float, float>(float x) { return x; }
}  // namespace ck

namespace tilegen_emu {

struct Wave {
  std::barrier<> sync{64};
  float a[64][4];
  float b[64][4];
  float x[64];
};

inline thread_local dim3 thread_idx;
inline thread_local dim3 block_idx;
inline dim3 grid_dim;
inline std::barrier<>* block_sync = nullptr;
inline Wave* waves = nullptr;

inline float to_float(uint16_t x) { return ck::bf16_to_float(x); }
inline float to_float(_Float16 x) { return float(x); }

template <typename V>
inline ck::float4_t mfma(V a, V b, ck::float4_t c) {
  int const lane = int(thread_idx.x % 64);
  Wave& w = waves[thread_idx.x / 64];
  for (int r = 0; r < 4; ++r) {
    w.a[lane][r] = to_float(a[r]);
    w.b[lane][r] = to_float(b[r]);
  }
  w.sync.arrive_and_wait();
  ck::float4_t d;
  for (int r = 0; r < 4; ++r) {
    int const i = 4 * (lane / 16) + r, j = lane % 16;
    float s = c[r];
    for (int k = 0; k < 16; ++k) {
      s += w.a[i + 16 * (k / 4)][k % 4] * w.b[j + 16 * (k / 4)][k % 4];
    }
    d[r] = s;
  }
  w.sync.arrive_and_wait();  // every lane has read the operands
  return d;
}

// __shfl_xor: every lane of the wave publishes its value, then reads its partner's.
inline float shfl_xor(float v, int mask) {
  int const lane = int(thread_idx.x % 64);
  Wave& w = waves[thread_idx.x / 64];
  w.x[lane] = v;
  w.sync.arrive_and_wait();
  float const got = w.x[(lane ^ mask) & 63];
  w.sync.arrive_and_wait();
  return got;
}

inline ck::float4_t mfma_bf16(ck::bhalf4_t a, ck::bhalf4_t b, ck::float4_t c, int, int, int) { return mfma(a, b, c); }
inline ck::float4_t mfma_f16(ck::half4_t a, ck::half4_t b, ck::float4_t c, int, int, int) { return mfma(a, b, c); }

// Runs every workgroup of the grid in turn, each as `threads` OS threads.
template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, int threads, A... args) {
  grid_dim = grid;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::barrier<> sync(threads);
        std::unique_ptr<Wave[]> w(new Wave[(threads + 63) / 64]);
        block_sync = &sync;
        waves = w.get();
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t) {
          pool.emplace_back([=] {
            thread_idx = dim3(unsigned(t));
            block_idx = dim3(x, y, z);
            kernel(static_cast<P>(args)...);
          });
        }
        for (auto& th : pool) th.join();
      }
}

}  // namespace tilegen_emu

#define threadIdx (tilegen_emu::thread_idx)
#define blockIdx (tilegen_emu::block_idx)
// gridDim is a variable, as in HIP, not a macro: hipLaunchConfig_t has a member of that name.
inline dim3 const& gridDim = tilegen_emu::grid_dim;
#define __builtin_amdgcn_mfma_f32_16x16x16bf16_1k tilegen_emu::mfma_bf16
#define __builtin_amdgcn_mfma_f32_16x16x16f16 tilegen_emu::mfma_f16
inline void __syncthreads() { tilegen_emu::block_sync->arrive_and_wait(); }
inline float __shfl_xor(float v, int mask) { return tilegen_emu::shfl_xor(v, mask); }
// HIP's device math beyond the C library's (the row-wise norms' rsqrt).
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

// The HIP runtime calls the launcher makes: hipLaunchKernelEx runs the grid to completion.
typedef void* hipStream_t;
enum hipError_t { hipSuccess = 0, hipErrorInvalidValue = 1, hipErrorUnknown = 999 };
struct hipLaunchConfig_t {
  dim3 gridDim, blockDim;
  size_t dynamicSmemBytes;
  hipStream_t stream;
};
template <typename... P, typename... A>
hipError_t hipLaunchKernelEx(hipLaunchConfig_t const* config, void (*kernel)(P...), A... args) {
  if (config->blockDim.y != 1 || config->blockDim.z != 1 || config->dynamicSmemBytes != 0) {
    return hipErrorInvalidValue;  // the emulation runs 1-D workgroups with static LDS only
  }
  tilegen_emu::launch(kernel, config->gridDim, int(config->blockDim.x), args...);
  return hipSuccess;
}

// The CUDA runtime calls of tilegen's validation harness, on host memory.
typedef int cudaError_t;
enum { cudaSuccess = 0 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost };
inline cudaError_t cudaMalloc(void** p, size_t bytes) { *p = std::malloc(bytes ? bytes : 1); return *p ? 0 : 2; }
inline cudaError_t cudaMemcpy(void* d, void const* s, size_t bytes, cudaMemcpyKind) { std::memcpy(d, s, bytes); return 0; }
inline cudaError_t cudaMemset(void* d, int v, size_t bytes) { std::memset(d, v, bytes); return 0; }
inline cudaError_t cudaDeviceSynchronize() { return 0; }
inline char const* cudaGetErrorString(cudaError_t) { return "emulated"; }
