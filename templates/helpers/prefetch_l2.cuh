// Asks L2 to fetch `bytes` bytes at `src` (16-byte aligned, a multiple of 16 bytes) in the
// background (sm_90: cp.async.bulk.prefetch). A hint: it takes no shared memory, completes on
// nothing and cannot make a later load see stale data (L2 is where other kernels' writes land).
CUTE_DEVICE void prefetch_l2(void const* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(src), "r"(bytes) : "memory");
}
