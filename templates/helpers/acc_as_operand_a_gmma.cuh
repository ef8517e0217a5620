// A warpgroup MMA accumulator layout ((2, 2, N/8), MMA_M, 1) read as the register A operand of
// a 64xNx16 warpgroup MMA: ((2, 2, 2), MMA_M, N/16). Every 16 columns of the accumulator hold
// exactly the values one k16 block of A needs in each thread, so no data moves.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_as_operand_a(Layout const& acc) {
  static_assert(decltype(size<2>(acc))::value == 1, "one MMA along N");
  auto n = logical_divide(get<0, 2>(acc), Int<2>{});  // (2, N/16)
  return make_layout(make_layout(get<0, 0>(acc), get<0, 1>(acc), get<0>(n)), get<1>(acc), get<1>(n));
}
