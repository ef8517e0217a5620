// Loads from shared memory at a 32-bit shared-window address (ld.shared): the addresses below
// are computed once per thread, so each load is one instruction with a constant offset.
CUTE_DEVICE uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
CUTE_DEVICE uint32_t ld_shared_u16(uint32_t addr) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr));
  return v;
}

// cp.async of 16 bytes to a 32-bit shared-window address, zero-filled when `valid` is
// false: CuTe's SM80_CP_ASYNC_CACHEGLOBAL_ZFILL and SM80_CP_ASYNC_CACHEALWAYS_ZFILL, addressed
// so that each of a thread's shared offsets takes one register. cp_async_16 bypasses L1 (data
// read once); cp_async_16_l1 keeps the line in L1 for other blocks on the SM that read it too.
CUTE_DEVICE void cp_async_16(uint32_t smem, void const* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" :: "r"(smem), "l"(gmem), "r"(valid ? 16 : 0));
}
CUTE_DEVICE void cp_async_16_l1(uint32_t smem, void const* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], 16, %2;" :: "r"(smem), "l"(gmem), "r"(valid ? 16 : 0));
}
