// The eight 4-bit values packed in a 32-bit word to (value - zero) * scale in f16 or bf16, as one
// 16-byte vector of values 0 .. 7: the four pairs of `dequant_int4x2`, in order
// (`neg_bias`: from `dequant_neg_bias`).
template <class T>
CUTE_DEVICE uint4 dequant_int4x8(uint32_t packed, T scale, uint32_t neg_bias) {
  uint32_t const scales = uint32_t(scale.raw()) * 0x10001u;
  uint4 out;
  uint32_t* halves = reinterpret_cast<uint32_t*>(&out);
  CUTE_UNROLL
  for (int p = 0; p < 4; ++p) {
    halves[p] = dequant_int4x2<T>(packed, p, scales, neg_bias);  // values 2p, 2p + 1
  }
  return out;
}
