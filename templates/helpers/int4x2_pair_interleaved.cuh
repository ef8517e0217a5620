// Values 2p and 2p + 1 of a word of eight 4-bit values packed in interleaved order (value 2i in
// bits 4i .. 4i+3, value 2i+1 in bits 16+4i .. 16+4i+3) in bits 0..3 and 16..19 of the result;
// its other bits are for the caller to mask off. The pair is already 16 bits apart: one shift.
CUTE_DEVICE uint32_t int4x2_pair(uint32_t word, uint32_t p) {
  return word >> (4 * p);
}
