// float -> i32 / i8 as the spec converts: toward zero, saturating to the type's range, NaN to 0
// (a plain static_cast is undefined outside the range).
CUTE_DEVICE int32_t float_to_i32(float x) {
  return x != x ? 0 : x >= 2147483648.0f ? 2147483647 : x <= -2147483648.0f ? -2147483647 - 1 : static_cast<int32_t>(x);
}
CUTE_DEVICE int8_t float_to_i8(float x) {
  return static_cast<int8_t>(x != x ? 0.0f : fminf(fmaxf(x, -128.0f), 127.0f));
}
