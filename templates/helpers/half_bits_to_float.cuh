// A 16-bit f16 or bf16 (the low half of `bits`) as a float, exactly.
template <class T>
CUTE_DEVICE float half_bits_to_float(uint32_t bits) {
  if constexpr (std::is_same_v<T, cute::bfloat16_t>) {
    return __uint_as_float(bits << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  }
}
