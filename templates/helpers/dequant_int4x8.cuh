// Eight 4-bit values packed in a 32-bit word (value i in bits 4i .. 4i+3) to (value - Zero) *
// scale in f16 or bf16, as one 16-byte vector. Each value goes into the low mantissa bits of a
// float whose ulp is 1 (1024.0 for f16, 128.0 for bf16), so subtracting that float plus Zero is
// exact and only the product with the scale rounds, once: no integer-to-float conversions.
template <int Zero, class T>
CUTE_DEVICE uint4 dequant_int4x8(uint32_t packed, T scale) {
  static_assert(0 <= Zero && Zero < 16, "Zero is a stored 4-bit value");
  constexpr bool kBf16 = std::is_same_v<T, cute::bfloat16_t>;
  constexpr uint32_t kMagic = kBf16 ? 0x4300u : 0x6400u;  // 128.0 or 1024.0
  constexpr uint32_t kOne = kBf16 ? 0x3F80u : 0x3C00u;
  constexpr uint32_t kNegBias = (0x8000u | (kMagic + Zero)) * 0x10001u;  // -(magic + Zero), twice
  uint32_t const one = kOne * 0x10001u;
  uint32_t const neg_zero = 0x80008000u;
  uint32_t const scales = uint32_t(scale.raw()) * 0x10001u;
  uint32_t const high = packed >> 4;  // byte p holds value 2p + 1 in its low bits
  uint32_t const mask = 0x000F000Fu;
  uint32_t const magic = kMagic * 0x10001u;
  uint4 out;
  uint32_t* halves = reinterpret_cast<uint32_t*>(&out);
  CUTE_UNROLL
  for (int p = 0; p < 4; ++p) {
    // Byte p of `packed` (value 2p in its low bits) and of `high` (value 2p + 1) into the
    // two halves; one lop3 keeps those four bits of each and ORs in the magic float.
    uint32_t const pair = __byte_perm(packed, high, 0x0400u + 0x0101u * p);
    uint32_t x, v;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x) : "r"(pair), "r"(mask), "r"(magic));  // (a & b) | c
    if constexpr (kBf16) {
      asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(x), "r"(one), "r"(kNegBias));
      asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(v), "r"(scales), "r"(neg_zero));
    } else {
      asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(x), "r"(one), "r"(kNegBias));
      asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(v), "r"(scales), "r"(neg_zero));
    }
    halves[p] = v;
  }
  return out;
}

