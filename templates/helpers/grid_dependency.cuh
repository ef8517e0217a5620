// Programmatic dependent launch (sm_90): the launcher lets this grid start while the kernel
// before it in the stream finishes. grid_dependency_wait() returns once that kernel has completed
// and its writes are visible (at once if there is none to wait for); the kernel reads and writes
// no global memory before it (an L2 prefetch, a hint, is neither). launch_dependent_grids() lets
// the next kernel in the stream, if it was launched the same way, start once every block of this
// grid has called it or exited.
// CUTLASS has both (cutlass/arch/grid_dependency_control.h), but they compile to nothing unless
// CUTLASS_ENABLE_GDC_FOR_SM90 is defined before its headers, and its wait has no memory clobber, so
// the compiler may move plain loads above it; these need neither.
CUTE_DEVICE void grid_dependency_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
CUTE_DEVICE void launch_dependent_grids() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
