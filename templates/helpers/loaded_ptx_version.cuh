// The virtual architecture the machine code loaded for `kernel` on the current device was built
// from (cudaFuncAttributes::ptxVersion: 80, 90, ...). cudaFuncGetAttributes is a driver round
// trip, so the answer is remembered per device, as CUB remembers its PtxVersion: the code loaded
// for a kernel does not change while the process runs, and every kernel of this file comes from
// the same compilation, so one answer per device serves them all.
inline cudaError_t loaded_ptx_version(void const* kernel, int& version) {
  constexpr int kDevicesRemembered = 64;  // devices past these are asked on every launch
  static std::atomic<int> remembered[kDevicesRemembered] = {};  // 0: not asked yet
  int device = 0;
  cudaError_t const device_err = cudaGetDevice(&device);
  if (device_err != cudaSuccess) {
    return device_err;
  }
  bool const rememberable = device >= 0 && device < kDevicesRemembered;
  version = rememberable ? remembered[device].load(std::memory_order_relaxed) : 0;
  if (version != 0) {
    return cudaSuccess;
  }
  cudaFuncAttributes attributes = {};
  cudaError_t const attributes_err = cudaFuncGetAttributes(&attributes, kernel);
  if (attributes_err != cudaSuccess) {
    return attributes_err;
  }
  version = attributes.ptxVersion;
  if (rememberable) {
    remembered[device].store(version, std::memory_order_relaxed);
  }
  return cudaSuccess;
}
