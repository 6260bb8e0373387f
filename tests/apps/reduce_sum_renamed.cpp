// reduce_sum_renamed: reduce_sum_optimized.cpp's reduction under another
// name, as an optimized build often renames its kernel
// (`ditto validate --opt-kernel reduce_sum_v2`).
#define reduce_sum reduce_sum_v2
#include "reduce_sum_optimized.cpp"
