// Values 2p and 2p + 1 of a word of eight 4-bit values packed in sequential order (value i in
// bits 4i .. 4i+3) in bits 0..3 and 16..19 of the result; its other bits are for the caller to
// mask off. Byte p of the word goes into the low half, byte p of the word shifted by a nibble
// into the high half.
CUTE_DEVICE uint32_t int4x2_pair(uint32_t word, uint32_t p) {
  return __byte_perm(word, word >> 4, 0x0400u + 0x0101u * p);
}
