// A warpgroup MMA accumulator layout ((2, 2, N/8), MMA_M, MMA_N) viewed as (row, col) of the
// values one thread holds: ((2, MMA_M), (2, N/8, MMA_N)). Each warp holds 16 rows of every
// 64-row MMA in the m16n8 pattern: value mode 1 steps 8 rows, value mode 0 one column, mode 2
// eight columns; the other three lanes of the thread's quad hold the rest of each row.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_rows_cols(Layout const& acc) {
  return make_layout(make_layout(get<0, 1>(acc), get<1>(acc)),
                     make_layout(get<0, 0>(acc), get<0, 2>(acc), get<2>(acc)));
}
