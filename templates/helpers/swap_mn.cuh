// A shared tile's layout with modes 0 and 1 swapped (the stage mode, if any, stays last): the
// same memory read as a transposed gemm operand. On a swizzled layout the swizzle applies to
// the offsets, so only the inner layout's modes move.
template <class Shape, class Stride>
CUTE_HOST_DEVICE constexpr auto swap_mn(Layout<Shape, Stride> const& l) {
  if constexpr (rank_v<Layout<Shape, Stride>> == 2) {
    return select<1, 0>(l);
  } else {
    return select<1, 0, 2>(l);
  }
}
template <class A, class O, class B>
CUTE_HOST_DEVICE constexpr auto swap_mn(ComposedLayout<A, O, B> const& l) {
  return composition(l.layout_a(), l.offset(), swap_mn(l.layout_b()));
}
