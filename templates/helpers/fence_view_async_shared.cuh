// Makes this thread's shared-memory writes (cp.async, zero fills: the generic proxy) visible
// to the async proxy that warpgroup MMAs read through; a barrier then publishes them.
CUTE_DEVICE void fence_view_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
