// A barrier over the consumer threads only (named barrier 1, kThreads threads): the producer
// threads never reach the consumers' barriers, so __syncthreads would hang.
CUTE_DEVICE void consumer_sync() {
  asm volatile("bar.sync 1, %0;" :: "n"(kThreads) : "memory");
}
