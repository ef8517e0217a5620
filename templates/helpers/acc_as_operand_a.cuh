// An m16n8 MMA accumulator layout ((2, 2), MMA_M, MMA_N) read as the A operand of an m16n8k16
// MMA: ((2, 2, 2), MMA_M, MMA_N / 2). The accumulators of two neighbouring n-blocks hold
// exactly the values one k16 block of A needs in each thread, so no data moves.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_as_operand_a(Layout const& acc) {
  auto n = logical_divide(get<2>(acc), Int<2>{});  // (2, MMA_N / 2)
  return make_layout(make_layout(get<0, 0>(acc), get<0, 1>(acc), get<0>(n)), get<1>(acc), get<1>(n));
}
