// An m16n8 MMA accumulator layout ((2, 2), MMA_M, MMA_N) viewed as (row, col) of the values
// one thread holds: ((2, MMA_M), (2, MMA_N)). Value mode 1 steps 8 rows, value mode 0 one
// column; the other three lanes of the thread's quad hold the rest of each row.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_rows_cols(Layout const& acc) {
  return make_layout(make_layout(get<0, 1>(acc), get<1>(acc)),
                     make_layout(get<0, 0>(acc), get<2>(acc)));
}
