// f32 -> E4M3 (e4m3fn) as the spec rounds: to nearest, ties to even, saturating at ±448, NaN
// to NaN. Integer arithmetic on the bits: code for sm_80 has no fp8 conversion instruction,
// and CUTLASS's portable conversion branches per value.
CUTE_DEVICE cutlass::float_e4m3_t float_to_e4m3(float x) {
  uint32_t const bits = __float_as_uint(x);
  uint32_t const magnitude = bits & 0x7fffffffu;
  float const a = fabsf(x);
  // Normal results: round the mantissa to 3 bits (the carry may step the exponent), rebias 127 -> 7.
  uint32_t const normal = ((magnitude + 0x7ffffu + ((magnitude >> 20) & 1u)) >> 20) - ((127u - 7u) << 3);
  // Below 2^-6: multiples of 2^-9.
  uint32_t const subnormal = static_cast<uint32_t>(rintf(a * 512.0f));
  uint32_t q = a < 0.015625f ? subnormal : normal;
  q = a >= 448.0f ? 0x7eu : q;
  q = x != x ? 0x7fu : q;
  return cutlass::float_e4m3_t::bitcast(static_cast<uint8_t>(((bits >> 24) & 0x80u) | q));
}
