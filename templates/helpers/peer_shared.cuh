// The address of `ptr` (this block's shared memory) at the same offset in the shared memory of
// block `rank` of the cluster (distributed shared memory, sm_90): a generic address that plain
// loads and stores reach.
template <class T>
CUTE_DEVICE T* peer_shared(T* ptr, uint32_t rank) {
  uint64_t peer;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(peer) : "l"(reinterpret_cast<uint64_t>(ptr)), "r"(rank));
  return reinterpret_cast<T*>(peer);
}
