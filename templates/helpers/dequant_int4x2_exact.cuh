// Values 2p and 2p + 1 of a packed word (found by `int4x2_pair`) to value - zero in f16 or bf16,
// exactly, as one 32-bit register: the low value in the low half. Each value goes into the low
// mantissa bits of a float whose ulp is 1 (1024.0 for f16, 128.0 for bf16), so adding `neg_bias`
// (that float plus the zero point, negated, in both halves: `dequant_neg_bias`) is exact.
template <class T>
CUTE_DEVICE uint32_t dequant_int4x2_exact(uint32_t word, uint32_t p, uint32_t neg_bias) {
  constexpr bool kBf16 = std::is_same_v<T, cute::bfloat16_t>;
  constexpr uint32_t kMagic = kBf16 ? 0x4300u : 0x6400u;  // 128.0 or 1024.0
  constexpr uint32_t kOne = kBf16 ? 0x3F80u : 0x3C00u;
  uint32_t const one = kOne * 0x10001u;
  uint32_t const mask = 0x000F000Fu;
  uint32_t const magic = kMagic * 0x10001u;
  // One lop3 keeps the four low bits of each half and ORs in the magic float.
  uint32_t const pair = int4x2_pair(word, p);
  uint32_t x, v;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x) : "r"(pair), "r"(mask), "r"(magic));  // (a & b) | c
  if constexpr (kBf16) {
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(x), "r"(one), "r"(neg_bias));
  } else {
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(x), "r"(one), "r"(neg_bias));
  }
  return v;
}

// dequant_int4x2(_exact)'s `neg_bias` for a zero point the spec fixes (a stored 4-bit value):
// -(magic + Zero) in both halves.
template <int Zero, class T>
CUTE_HOST_DEVICE constexpr uint32_t dequant_neg_bias() {
  static_assert(0 <= Zero && Zero < 16, "Zero is a stored 4-bit value");
  constexpr uint32_t kMagic = std::is_same_v<T, cute::bfloat16_t> ? 0x4300u : 0x6400u;
  return (0x8000u | (kMagic + Zero)) * 0x10001u;
}

// dequant_int4x2(_exact)'s `neg_bias` for a zero point read at run time (`zeros`: an integer
// 0..15 as T, in both halves): -1 * zero - magic, exact (the result's ulp is 1).
template <class T>
CUTE_DEVICE uint32_t dequant_neg_bias(uint32_t zeros) {
  constexpr bool kBf16 = std::is_same_v<T, cute::bfloat16_t>;
  uint32_t const minus_one = (kBf16 ? 0xBF80u : 0xBC00u) * 0x10001u;
  uint32_t const minus_magic = (kBf16 ? 0xC300u : 0xE400u) * 0x10001u;
  uint32_t v;
  if constexpr (kBf16) {
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(zeros), "r"(minus_one), "r"(minus_magic));
  } else {
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(zeros), "r"(minus_one), "r"(minus_magic));
  }
  return v;
}
