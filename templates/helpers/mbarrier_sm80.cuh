// Shared-memory mbarriers as sm_80 has them (PTX 7.0): a stage is full once every thread's
// cp.async copies into it have landed (each thread's cp.async.mbarrier.arrive.noinc arrives
// when they have), and empty once every thread has arrived after reading it. A wait spins on
// the phase parity.
CUTE_DEVICE void mbarrier_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
CUTE_DEVICE void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      " .reg .pred done;\n"
      " WAIT:\n"
      " mbarrier.test_wait.parity.shared.b64 done, [%0], %1;\n"
      " @!done bra WAIT;\n"
      "}" :: "r"(bar), "r"(parity) : "memory");
}
CUTE_DEVICE void mbarrier_arrive(uint32_t bar) {
  asm volatile("{ .reg .b64 state; mbarrier.arrive.shared.b64 state, [%0]; }" :: "r"(bar) : "memory");
}
CUTE_DEVICE void mbarrier_arrive_on_copies(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" :: "r"(bar) : "memory");
}
