// cp_async_rows_from_words copies one tile of 16-bit rows when a row may start 2 bytes into a
// word, where cp.async cannot start: the tile's rows are rows first_row.. of a row-major tensor
// of num_rows rows of row_len elements, its columns first_col..; each row is copied from the
// 4-byte word holding its first element, one word more than its elements span, into a row of
// `smem_rows` two elements wider than the tile, so a row that started mid-word is read one
// element later. Bytes past the row, or past the tensor's last row, are zero-filled; threads
// take consecutive words.
template <int kThreads, class SmemRows, class T>
CUTE_DEVICE void cp_async_rows_from_words(SmemRows smem_rows, T const* gmem, int64_t first_row, int64_t num_rows,
                                          int64_t row_len, int64_t first_col, int tid) {
  constexpr int kRows = decltype(size<0>(smem_rows))::value;
  constexpr int kWordsPerRow = decltype(size<1>(smem_rows))::value / 2;  // the tile's elements, and one word more
  CUTE_UNROLL
  for (int i = 0; i < (kRows * kWordsPerRow + kThreads - 1) / kThreads; ++i) {
    int const slot = i * kThreads + tid;
    if ((kRows * kWordsPerRow) % kThreads == 0 || slot < kRows * kWordsPerRow) {
      int const slot_row = slot / kWordsPerRow, slot_word = slot % kWordsPerRow;
      int64_t const row = first_row + slot_row;
      int64_t const row_first = row * row_len + first_col;  // the row's first element in the tile
      int64_t const word_at = row_first - row_first % 2 + 2 * slot_word;  // the word's first element
      int64_t const row_left = (row + 1) * row_len - word_at;  // elements of the row from there on
      int const bytes = row < num_rows ? (row_left >= 2 ? 4 : row_left == 1 ? 2 : 0) : 0;
      cp_async_4_bytes(cast_smem_ptr_to_uint(&smem_rows(slot_row, 2 * slot_word)), gmem + (bytes > 0 ? word_at : 0), bytes);
    }
  }
}
