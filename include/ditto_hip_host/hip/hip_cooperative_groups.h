// include/ditto_hip_host/hip/hip_cooperative_groups.h — cooperative groups
// in the host build.
//
// Groups of the running work-group on ditto's CPU runtime: the whole block
// (thread_block: its sync is __syncthreads), tiles of 1 to 64 work-items
// inside one wavefront (thread_block_tile<N>, and tiled_partition with a
// size known at run time: their sync, shuffles and votes are the cross-lane
// operations of ditto_hip_cpu.hpp restricted to the tile), the coalesced
// lanes of a wavefront, and the grid. A grid-wide sync needs every group of
// the grid running at once: a cooperative launch (hipLaunchCooperativeKernel),
// which the CPU runtime honours by giving each group an OS thread of its
// own (ditto_hsa_cpu.h, "Cooperative launches"). grid_group::sync() is a
// barrier of the work-group, the grid barrier called by the group's first
// work-item, and a barrier of the work-group again. grid_group::is_valid()
// is true in a cooperative launch only; a sync outside one aborts with a
// message (a GPU would hang).
#ifndef DITTO_HIP_HOST_HIP_COOPERATIVE_GROUPS_H
#define DITTO_HIP_HOST_HIP_COOPERATIVE_GROUPS_H

#include <hip/hip_runtime.h>

namespace cooperative_groups {
namespace detail {
static inline unsigned block_rank() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
static inline unsigned block_size() { return blockDim.x * blockDim.y * blockDim.z; }
// The bits of a wavefront-wide mask that belong to the tile of `size` lanes
// holding lane `lane`, shifted down to bit 0.
static inline unsigned long long tile_bits(unsigned long long wave_mask, unsigned lane, unsigned size) {
  const unsigned first = lane / size * size;
  const unsigned long long mask = size >= 64 ? ~0ull : ((1ull << size) - 1);
  return (wave_mask >> first) & mask;
}
}  // namespace detail

class thread_group {
 public:
  explicit thread_group(unsigned size) : size_(size) {}
  unsigned size() const { return size_; }
  unsigned num_threads() const { return size_; }
  unsigned thread_rank() const {
    return size_ == detail::block_size() ? detail::block_rank() : detail::block_rank() % size_;
  }
  void sync() const {
    if (size_ <= 64) {
      __syncwarp();
    } else {
      __syncthreads();
    }
  }
  bool is_valid() const { return size_ > 0; }

 private:
  unsigned size_;
};

class thread_block {
 public:
  void sync() const { __syncthreads(); }
  unsigned thread_rank() const { return detail::block_rank(); }
  unsigned size() const { return detail::block_size(); }
  unsigned num_threads() const { return detail::block_size(); }
  dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
  dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
  dim3 group_dim() const { return dim3(blockDim.x, blockDim.y, blockDim.z); }
  bool is_valid() const { return true; }
  operator thread_group() const { return thread_group(size()); }
};

static inline thread_block this_thread_block() { return thread_block(); }

template <unsigned int Size>
class thread_block_tile {
  static_assert(Size > 0 && Size <= 64 && (Size & (Size - 1)) == 0,
                "a thread_block_tile has 1, 2, 4, 8, 16, 32 or 64 work-items (one wavefront at most)");

 public:
  static constexpr unsigned int numThreads = Size;
  void sync() const { __syncwarp(); }
  unsigned thread_rank() const { return detail::block_rank() % Size; }
  static constexpr unsigned size() { return Size; }
  static constexpr unsigned num_threads() { return Size; }
  unsigned meta_group_rank() const { return detail::block_rank() / Size; }
  unsigned meta_group_size() const { return (detail::block_size() + Size - 1) / Size; }
  bool is_valid() const { return true; }
  template <typename T>
  T shfl(T var, int src_rank) const { return __shfl(var, src_rank, Size); }
  template <typename T>
  T shfl_down(T var, unsigned int delta) const { return __shfl_down(var, delta, Size); }
  template <typename T>
  T shfl_up(T var, unsigned int delta) const { return __shfl_up(var, delta, Size); }
  template <typename T>
  T shfl_xor(T var, unsigned int mask) const { return __shfl_xor(var, mask, Size); }
  unsigned long long ballot(int predicate) const {
    return detail::tile_bits(__ballot(predicate), __lane_id(), Size);
  }
  int any(int predicate) const { return ballot(predicate) != 0; }
  int all(int predicate) const {
    const unsigned long long active = detail::tile_bits(__activemask(), __lane_id(), Size);
    return ballot(predicate) == active;
  }
  operator thread_group() const { return thread_group(Size); }
};

template <unsigned int Size, typename Parent>
static inline thread_block_tile<Size> tiled_partition(const Parent&) {
  return thread_block_tile<Size>();
}

// A partition whose size is known at run time: a power of two up to 64, or
// the whole block.
static inline thread_group tiled_partition(const thread_group& parent, unsigned int tile_size) {
  return thread_group(tile_size < parent.size() ? tile_size : parent.size());
}
static inline thread_group tiled_partition(const thread_block& parent, unsigned int tile_size) {
  return tiled_partition(static_cast<thread_group>(parent), tile_size);
}

// The lanes of the wavefront that reach this call together.
class coalesced_group {
 public:
  coalesced_group() : mask_(__activemask()) {}
  unsigned size() const { return static_cast<unsigned>(__popcll(mask_)); }
  unsigned num_threads() const { return size(); }
  unsigned thread_rank() const {
    const unsigned lane = __lane_id();
    return static_cast<unsigned>(__popcll(mask_ & ((1ull << lane) - 1)));
  }
  void sync() const { __syncwarp(); }
  unsigned long long ballot(int predicate) const { return __ballot(predicate); }

 private:
  unsigned long long mask_;
};
static inline coalesced_group coalesced_threads() { return coalesced_group(); }

class grid_group {
 public:
  unsigned long long thread_rank() const {
    const unsigned long long group =
        blockIdx.x + static_cast<unsigned long long>(gridDim.x) * (blockIdx.y + static_cast<unsigned long long>(gridDim.y) * blockIdx.z);
    return group * detail::block_size() + detail::block_rank();
  }
  unsigned long long size() const {
    return static_cast<unsigned long long>(gridDim.x) * gridDim.y * gridDim.z * detail::block_size();
  }
  unsigned long long num_threads() const { return size(); }
  bool is_valid() const { return ditto_grid_barrier_available(); }
  void sync() const {
    __syncthreads();
    if (detail::block_rank() == 0) ditto_grid_barrier();
    __syncthreads();
  }
};
static inline grid_group this_grid() { return grid_group(); }

// Reductions over a tile (as CUDA's cooperative_groups::reduce).
template <typename T>
struct plus {
  T operator()(T a, T b) const { return a + b; }
};
template <typename T>
struct less {
  T operator()(T a, T b) const { return a < b ? a : b; }
};
template <typename T>
struct greater {
  T operator()(T a, T b) const { return a > b ? a : b; }
};
template <unsigned int Size, typename T, typename Op>
static inline T reduce(const thread_block_tile<Size>& tile, T value, Op op) {
  for (unsigned offset = Size / 2; offset > 0; offset /= 2) value = op(value, tile.shfl_xor(value, offset));
  return value;
}

}  // namespace cooperative_groups

#endif  // DITTO_HIP_HOST_HIP_COOPERATIVE_GROUPS_H
