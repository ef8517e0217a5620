// dequant_int4x2_exact's values times the scale (`scales`: the scale in both halves), (value -
// zero) * scale in f16 or bf16: only the product rounds, once.
template <class T>
CUTE_DEVICE uint32_t dequant_int4x2(uint32_t word, uint32_t p, uint32_t scales, uint32_t neg_bias) {
  uint32_t const neg_zero = 0x80008000u;
  uint32_t const x = dequant_int4x2_exact<T>(word, p, neg_bias);
  uint32_t v;
  if constexpr (std::is_same_v<T, cute::bfloat16_t>) {
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(x), "r"(scales), "r"(neg_zero));
  } else {
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(v) : "r"(x), "r"(scales), "r"(neg_zero));
  }
  return v;
}
