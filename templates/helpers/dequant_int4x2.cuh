// Two 4-bit values of a packed word, the pair in byte `sel` selects (value i of the word in bits
// 4i .. 4i+3; `sel` = 0x0400 + 0x0101 * byte), to (value - Zero) * scale in f16 or bf16, as one
// 32-bit register: the low value in the low half. Each value goes into the low mantissa bits of
// a float whose ulp is 1 (1024.0 for f16, 128.0 for bf16), so subtracting that float plus Zero is
// exact and only the product with the scale (`scales`: the scale in both halves) rounds, once.
template <int Zero, class T>
CUTE_DEVICE uint32_t dequant_int4x2(uint32_t word, uint32_t sel, uint32_t scales) {
  static_assert(0 <= Zero && Zero < 16, "Zero is a stored 4-bit value");
  constexpr bool kBf16 = std::is_same_v<T, cute::bfloat16_t>;
  constexpr uint32_t kMagic = kBf16 ? 0x4300u : 0x6400u;  // 128.0 or 1024.0
  constexpr uint32_t kOne = kBf16 ? 0x3F80u : 0x3C00u;
  constexpr uint32_t kNegBias = (0x8000u | (kMagic + Zero)) * 0x10001u;  // -(magic + Zero), twice
  uint32_t const one = kOne * 0x10001u;
  uint32_t const neg_zero = 0x80008000u;
  uint32_t const mask = 0x000F000Fu;
  uint32_t const magic = kMagic * 0x10001u;
  // The byte into the low half and the same byte of the word shifted by a nibble into the
  // high half; one lop3 keeps the four low bits of each and ORs in the magic float.
  uint32_t const pair = __byte_perm(word, word >> 4, sel);
  uint32_t x, v;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x) : "r"(pair), "r"(mask), "r"(magic));  // (a & b) | c
  if constexpr (kBf16) {
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(x), "r"(one), "r"(kNegBias));
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(v), "r"(scales), "r"(neg_zero));
  } else {
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(x), "r"(one), "r"(kNegBias));
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(v), "r"(scales), "r"(neg_zero));
  }
  return v;
}

