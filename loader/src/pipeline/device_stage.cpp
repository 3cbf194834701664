// The device stage: copies finished batches to the GPU, keeping up to one copy per stream in
// flight. It waits on the oldest copy only when every stream is busy or nothing new is ready, so
// copies overlap with each other and with IO, decode and collate; batches reach the consumer in
// order. A batch's buffer returns to the pool only when the consumer drops the batch, after its
// copy finished.
#include <deque>

#include "device_sink.hpp"
#include "stages.hpp"

namespace feedline::loader::detail {

void DeviceStage::run(Worker& w) {
  DeviceSink& sink = *run_.sink;
  struct Copying {
    Batch batch;
    DeviceSink::Ticket ticket;
  };
  std::deque<Copying> copying;
  const std::size_t depth = sink.streams();
  for (;;) {
    std::optional<Batch> b;
    if (copying.empty()) {
      b = w.pop(run_.batches);
    } else if (copying.size() < depth) {
      b = w.pop_for(run_.batches, std::chrono::nanoseconds(0));
    }
    if (b) {
      auto t = sink.copy(*BatchAccess::buffer(*b), b->data().size());
      if (!t) {
        run_.fail(std::move(t).error().with_hint(
            "the GPU copy failed mid-run; check the device (nvidia-smi)"));
        break;
      }
      copying.push_back({std::move(*b), *t});
      continue;
    }
    if (copying.empty()) break;  // closed and drained
    const std::uint64_t t0 = now_ns();
    auto waited = w.working([&] { return sink.wait(copying.front().ticket); });
    const std::uint64_t t1 = now_ns();
    if (!waited) {
      copying.pop_front();
      run_.fail(std::move(waited).error());
      break;
    }
    Batch out = std::move(copying.front().batch);
    copying.pop_front();
    BatchAccess::on_device(out, t0, t1);
    w.count(1, out.bytes());
    if (!w.push(run_.device_batches, out)) break;
  }
  // Stopping: let copies still running finish before their host buffers can be reused.
  for (auto& c : copying) (void)sink.wait(c.ticket);
  copying.clear();
  run_.device_batches.close();
}

}  // namespace feedline::loader::detail
