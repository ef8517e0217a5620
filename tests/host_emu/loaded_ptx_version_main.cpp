// Runs the sm80 decode launchers' loaded_ptx_version helper on the host (tests/device_helpers.rs)
// against a stand-in for the CUDA runtime: a current device, a PTX version per device, and
// errors on demand. Reads commands from stdin, one per line:
//   ptx D V      the driver reports PTX version V for the kernel on device D
//   fail E       cudaFuncGetAttributes fails with E from now on (0: succeeds again)
//   nodevice E   cudaGetDevice fails with E from now on (0: succeeds again)
//   ask D        make D current and call loaded_ptx_version
// and prints, per `ask`, "err=E version=V asked=N" (N: cudaFuncGetAttributes calls so far).
#include <atomic>
#include <cstdio>
#include <cstring>

using cudaError_t = int;
constexpr cudaError_t cudaSuccess = 0;
struct cudaFuncAttributes {
  int binaryVersion;
  int ptxVersion;
};

namespace {
int current_device = 0;
cudaError_t device_error = cudaSuccess;
cudaError_t attributes_error = cudaSuccess;
int ptx[256] = {};
int asked = 0;
}  // namespace

cudaError_t cudaGetDevice(int* device) {
  if (device_error != cudaSuccess) {
    return device_error;
  }
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, void const*) {
  ++asked;
  if (attributes_error != cudaSuccess) {
    return attributes_error;
  }
  attributes->ptxVersion = ptx[current_device];
  return cudaSuccess;
}

#include "loaded_ptx_version.cuh"

__attribute__((noinline)) void kernel_stand_in() {}

int main() {
  char command[16];
  int a = 0, b = 0;
  while (std::scanf("%15s %d", command, &a) == 2) {
    if (std::strcmp(command, "ptx") == 0 && std::scanf("%d", &b) == 1) {
      ptx[a] = b;
    } else if (std::strcmp(command, "fail") == 0) {
      attributes_error = a;
    } else if (std::strcmp(command, "nodevice") == 0) {
      device_error = a;
    } else if (std::strcmp(command, "ask") == 0) {
      current_device = a;
      int version = -1;
      cudaError_t const err = loaded_ptx_version(reinterpret_cast<void const*>(&kernel_stand_in), version);
      std::printf("err=%d version=%d asked=%d\n", err, err == cudaSuccess ? version : -1, asked);
    } else {
      return 2;
    }
  }
  return 0;
}
