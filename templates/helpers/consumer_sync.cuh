// A barrier over the consumer warpgroups only (named barrier 1, kThreads threads): the
// producer warpgroup never reaches the consumers' barriers, so __syncthreads would hang.
CUTE_DEVICE void consumer_sync() {
  asm volatile("bar.sync 1, %0;" :: "n"(kThreads) : "memory");
}
