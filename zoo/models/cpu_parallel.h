// A parallel loop over XLA's FFI thread pool, shared by the zoo's CPU
// kernels (cpu_attention.cc, cpu_transpose.cc).

#ifndef ZOO_MODELS_CPU_PARALLEL_H_
#define ZOO_MODELS_CPU_PARALLEL_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "xla/ffi/api/ffi.h"

namespace zoo {

// Runs fn(item, local) for every item in [0, items) on the caller's thread
// and the pool's, where each thread makes its own `local = make()` (its
// scratch space). Returns when every item is done. Workers that start
// after the items ran out return at once, so the caller never waits on a
// task that was not scheduled to run; everything a worker uses is its own
// copy.
template <typename Make, typename Fn>
void ParallelFor(xla::ffi::ThreadPool& pool, int64_t items, Make make, Fn fn) {
  struct State {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::mutex mu;
    std::condition_variable cv;
  };
  if (items <= 0) return;
  auto state = std::make_shared<State>();
  auto work = [state, items, make, fn]() {
    int64_t i = state->next.fetch_add(1);
    if (i >= items) return;
    auto local = make();
    int64_t finished = 0;
    for (; i < items; i = state->next.fetch_add(1), ++finished) fn(i, local);
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->done.fetch_add(finished) + finished == items)
      state->cv.notify_all();
  };
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), items) - 1;
  for (int64_t w = 0; w < helpers; ++w) pool.Schedule(decltype(work)(work));
  work();
  std::unique_lock<std::mutex> lock(state->mu);
  state->cv.wait(lock, [&] { return state->done.load() == items; });
}

}  // namespace zoo

#endif  // ZOO_MODELS_CPU_PARALLEL_H_
