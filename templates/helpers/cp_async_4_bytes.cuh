// cp_async_4_bytes copies the first `bytes` (0, 2 or 4) of an aligned 4-byte word and zero-fills
// the rest: 16-bit rows that start or end mid-word are moved in whole words.
CUTE_DEVICE void cp_async_4_bytes(uint32_t smem, void const* gmem, int bytes) {
  asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], 4, %2;" :: "r"(smem), "l"(gmem), "r"(bytes));
}
