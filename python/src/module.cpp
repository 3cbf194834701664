// feedline._feedline: the native half of the Python package. One more user of the C++ API, as
// the CLI is: `run`'s own option parser (tools/src/run_options.hpp) turns the keywords the
// Python layer spells as flags into a LoaderConfig, feedline::loader::Loader runs the pipeline,
// and the report is the document `feedline run --json` writes.
//
// Threads: the Python thread that iterates is the pipeline's consumer: it waits for a batch with
// the GIL released (Loader::next_for) and wakes every 100 ms to let Python run its signal
// handlers (Ctrl-C interrupts within a second). No thread of its own: a hand-over to one and back
// cost two wake-ups per batch. The time between handing a batch to Python and Python asking for
// the next is the training step's compute time (Loader::record_compute), which gives the report
// its AU and consumer-wait figures.
//
// Lifetimes: a batch's numpy views keep their Batch object alive, which keeps its buffer's pool
// and the dataset it names (keys, member names) alive, also after the Loader is closed.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <dlpack/dlpack.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "cli_error.hpp"
#include "feedline/core/clock.hpp"
#include "feedline/core/redact.hpp"
#include "feedline/loader/image.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/metrics.hpp"
#include "feedline/loader/sampler.hpp"
#include "loader_state.hpp"
#include "run_options.hpp"

namespace py = pybind11;
namespace fl = feedline;
namespace ld = feedline::loader;

namespace {

PyObject* g_error = nullptr;  // feedline.Error (an OSError)

[[noreturn]] void raise_error(const fl::Error& e) {
  const int err = e.code() == fl::Errc::kNotFound            ? ENOENT
                  : e.code() == fl::Errc::kPermissionDenied  ? EACCES
                  : e.code() == fl::Errc::kResourceExhausted ? ENOBUFS
                                                             : EIO;
  py::object exc = py::reinterpret_borrow<py::object>(g_error)(err, e.what());
  PyErr_SetObject(g_error, exc.ptr());
  throw py::error_already_set();
}

[[noreturn]] void raise_value(const std::string& what) { throw py::value_error(what); }

// A zstd member's name as its decoded bytes are: "000123.bin.zst" -> "000123.bin", so
// member(".bin") finds it as it would the stored ".bin".
std::string_view decoded_name(std::string_view name) {
  return name.ends_with(".zst") ? name.substr(0, name.size() - 4) : name;
}

// True once the interpreter is shutting down: a pipeline thread must not take the GIL then (it
// would hang in PyGILState_Ensure while the main thread waits to join it).
bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// transform=fn on the decode threads (feedline/loader/transform.hpp). Each call takes the GIL
// for fn only, and reports how long it waited for it. fn gets a dict: "__key__" and each member's
// decoded bytes (a copy, so fn may keep it) under the member's name after the sample's key, as
// WebDataset names them (".bin", ".cls"; a zstd member's without ".zst": the bytes are decoded);
// what it returns rides in the
// batch (Batch.transformed). The first exception fn raises is kept, to be raised again from the
// loop with the sample named.
class PyTransform final : public ld::SampleTransform {
 public:
  explicit PyTransform(py::object fn) : fn_(std::move(fn)) {}
  ~PyTransform() override {
    if (finalizing()) {  // leaked rather than touched: the interpreter is going away
      fn_.release();
      first_error_.release();
      return;
    }
    py::gil_scoped_acquire gil;
    fn_ = py::object();
    first_error_ = py::object();
  }

  fl::Result<ld::TransformResult> apply(const ld::TransformInput& in,
                                        ld::TransformCall& call) override {
    if (finalizing()) return fl::fail(fl::Errc::kCancelled, "the interpreter is shutting down");
    const std::uint64_t asked = fl::now_ns();
    py::gil_scoped_acquire gil;
    call.lock_wait = std::chrono::nanoseconds(fl::now_ns() - asked);
    try {
      py::dict sample;
      sample["__key__"] = py::str(in.key.data(), in.key.size());
      for (const ld::TransformMember& m : in.members) {
        // WebDataset's keys: the name after the sample's key (".bin" of "000123.bin.zst").
        std::string_view name = decoded_name(m.name);
        if (name.starts_with(in.key)) name.remove_prefix(in.key.size());
        sample[py::str(name.data(), name.size())] =
            py::bytes(reinterpret_cast<const char*>(m.bytes.data()), m.bytes.size());
      }
      py::object out = fn_(sample);
      if (out.is_none()) return ld::TransformResult();
      PyObject* held = out.release().ptr();
      return ld::TransformResult(held, [](const void* p) {
        if (finalizing()) return;      // see finalizing()
        py::gil_scoped_acquire again;  // the last batch holding it may die on any thread
        Py_DECREF(static_cast<PyObject*>(const_cast<void*>(p)));
      });
    } catch (py::error_already_set& e) {
      std::string what = e.what();
      if (!first_error_) {
        first_error_ = e.value();
        first_key_ = std::string(in.key);
      }
      return fl::fail(fl::Errc::kInvalidArgument, std::move(what));
    }
  }

  // The exception fn raised for `key`'s sample, if it was the first (with the GIL held).
  py::object take_error(const std::string& message) {
    if (!first_error_ || message.find(fmt::format("sample '{}'", first_key_)) == std::string::npos)
      return py::object();
    return std::exchange(first_error_, py::object());
  }
  const std::string& error_key() const noexcept { return first_key_; }

 private:
  py::object fn_;
  py::object first_error_;  // guarded by the GIL
  std::string first_key_;
};

// What outlives the Loader for its batches: the backend and the dataset they were read from.
struct Opened {
  fl::tools::RunOptions options;
  fl::tools::RunSetup setup;
  fl::tools::RunDataset data;
  std::shared_ptr<ld::MetricsEndpoint> metrics;  // metrics_port=: while the loader lives
};

class PyBatch {
 public:
  PyBatch(std::shared_ptr<const Opened> opened, ld::Batch b)
      : opened_(std::move(opened)), batch_(std::move(b)) {}

  std::size_t size() const { return batch_.samples().size(); }
  std::uint32_t epoch() const { return batch_.epoch(); }
  std::uint64_t index() const { return batch_.index(); }
  std::uint64_t digest() const { return batch_.digest(); }
  std::uint64_t nbytes() const { return batch_.bytes(); }

  // What transform= returned for each sample (None where it returned None); empty without one.
  py::list transformed() const {
    py::list out;
    for (const ld::TransformResult& r : batch_.results()) {
      out.append(
          r ? py::reinterpret_borrow<py::object>(static_cast<PyObject*>(const_cast<void*>(r.get())))
            : py::none());
    }
    return out;
  }

  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    out.reserve(size());
    for (const auto& s : batch_.samples()) out.emplace_back(s.key);
    return out;
  }

  // Each sample's member whose name ends with `suffix` (".bin", ".cls"; "" for a sample's only
  // member). KeyError naming the sample when one has none, ValueError when one has several.
  std::vector<const ld::BatchMember*> select(const std::string& suffix) const {
    std::vector<const ld::BatchMember*> out;
    out.reserve(size());
    for (const auto& s : batch_.samples()) {
      const ld::BatchMember* found = nullptr;
      for (const auto& m : batch_.members_of(s)) {
        const bool match = suffix.empty()
                               ? batch_.members_of(s).size() == 1
                               : m.name.ends_with(suffix) || decoded_name(m.name).ends_with(suffix);
        if (!match) continue;
        if (found) {
          raise_value(fmt::format("sample '{}' has several members ending in '{}' ('{}', '{}')",
                                  s.key, suffix, found->name, m.name));
        }
        found = &m;
      }
      if (!found) {
        std::string names;
        for (const auto& m : batch_.members_of(s)) names += fmt::format(" '{}'", m.name);
        throw py::key_error(fmt::format("sample '{}' has no member {}(its members:{})", s.key,
                                        suffix.empty()
                                            ? std::string("of its own: name one by its ending ")
                                            : fmt::format("ending in '{}' ", suffix),
                                        names));
      }
      out.push_back(found);
    }
    return out;
  }

  // The members as one [n, size] tensor without a copy, where they allow it: every one the same
  // size, at one stride (files of one size; tar shards of fixed-size samples). nullopt when not.
  struct Strided {
    std::uint64_t first = 0, stride = 0, width = 0;
  };
  static std::optional<Strided> strided(const std::vector<const ld::BatchMember*>& members) {
    if (members.empty()) return std::nullopt;
    for (const auto* m : members) {
      if (!(m->shape == members[0]->shape)) return std::nullopt;  // images of several shapes
    }
    Strided st{members[0]->offset, 0, members[0]->size};
    if (members.size() > 1) {
      if (members[1]->offset <= members[0]->offset) return std::nullopt;
      st.stride = members[1]->offset - members[0]->offset;
    }
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (members[i]->size != st.width || members[i]->offset != st.first + i * st.stride)
        return std::nullopt;
    }
    if (members.size() > 1 && st.stride < st.width) return std::nullopt;
    return st;
  }

  // Where a DLPack tensor of this batch lives: its GPU twin when it has one, else host memory.
  std::pair<const std::uint8_t*, DLDevice> dlpack_base() const {
    if (const void* d = batch_.device_data()) {
      return {static_cast<const std::uint8_t*>(d),
              DLDevice{kDLCUDA, opened_->setup.ctx.config.device.device}};
    }
    return {host(), DLDevice{kDLCPU, 0}};
  }

  const std::uint8_t* host() const {
    if (batch_.data().empty() && batch_.extent() > 0) {
      raise_value("this batch was read straight into GPU memory: it has no host bytes");
    }
    return reinterpret_cast<const std::uint8_t*>(batch_.data().data());
  }

  // A read-only uint8 view of `size` bytes at `offset` of the batch; it keeps `self` alive.
  // Made with NumPy's own calls (through pybind11's table of them), not py::array's constructor:
  // its shape and stride containers and flag checks cost ~1 us a view, a batch's member() then
  // ~100 us of the GIL for 64 samples.
  // A decoded image's view has its shape, (height, width, channels).
  static py::object view(py::handle self, const std::uint8_t* base, std::uint64_t offset,
                         std::uint64_t size, const ld::ImageShape& shape = {}) {
    auto& api = py::detail::npy_api::get();
    const bool image = shape.image() && shape.bytes() == size;
    Py_intptr_t dims[3] = {static_cast<Py_intptr_t>(size), 0, 0};
    Py_intptr_t strides[3] = {1, 0, 0};
    if (image) {
      dims[0] = shape.height;
      dims[1] = shape.width;
      dims[2] = shape.channels;
      strides[2] = 1;
      strides[1] = shape.channels;
      strides[0] = static_cast<Py_intptr_t>(shape.width) * shape.channels;
    }
    // DescrFromType's reference is NewFromDescr's to take; flags 0: read-only.
    PyObject* a = api.PyArray_NewFromDescr_(
        api.PyArray_Type_, api.PyArray_DescrFromType_(py::detail::npy_api::NPY_UBYTE_),
        image ? 3 : 1, dims, strides, const_cast<std::uint8_t*>(base + offset), 0, nullptr);
    if (!a) throw py::error_already_set();
    if (api.PyArray_SetBaseObject_(a, self.inc_ref().ptr()) != 0) {  // takes the reference
      Py_DECREF(a);
      throw py::error_already_set();
    }
    return py::reinterpret_steal<py::object>(a);
  }

 private:
  std::shared_ptr<const Opened> opened_;  // keys and member names point into its dataset
  ld::Batch batch_;
};

// A DLPack tensor over a batch's buffer (dlpack.h 0.6): what its consumer (torch.from_dlpack)
// holds keeps the Python Batch, and so the buffer, alive; its deleter may run on any thread.
struct DlpackHolder {
  py::object batch;
  std::int64_t shape[4] = {0, 0, 0, 0};
  std::int64_t strides[4] = {0, 1, 0, 0};
  DLManagedTensor tensor{};
};

void delete_dlpack(DLManagedTensor* t) {
  auto* h = static_cast<DlpackHolder*>(t->manager_ctx);
  if (finalizing()) {  // see finalizing(): leak rather than touch a dying interpreter
    h->batch.release();
    delete h;
    return;
  }
  py::gil_scoped_acquire gil;
  delete h;
}

// A "dltensor" capsule of the [n, width] uint8 tensor at `data` with rows `stride` bytes apart;
// of images of one shape, [n, height, width, channels].
py::capsule dlpack_capsule(py::object batch, const std::uint8_t* data, DLDevice device,
                           std::uint64_t n, std::uint64_t width, std::uint64_t stride,
                           const ld::ImageShape& image = {}) {
  auto* h = new DlpackHolder;
  h->batch = std::move(batch);
  h->shape[0] = static_cast<std::int64_t>(n);
  h->shape[1] = static_cast<std::int64_t>(width);
  h->strides[0] = static_cast<std::int64_t>(n > 1 ? stride : width);
  int ndim = 2;
  if (image.image() && image.bytes() == width) {
    ndim = 4;
    h->shape[1] = image.height;
    h->shape[2] = image.width;
    h->shape[3] = image.channels;
    h->strides[3] = 1;
    h->strides[2] = image.channels;
    h->strides[1] = static_cast<std::int64_t>(image.width) * image.channels;
  }
  DLTensor& d = h->tensor.dl_tensor;
  d.data = const_cast<std::uint8_t*>(data);  // DLPack has no read-only tensors (0.6)
  d.device = device;
  d.ndim = ndim;
  d.dtype = DLDataType{kDLUInt, 8, 1};
  d.shape = h->shape;
  d.strides = h->strides;
  d.byte_offset = 0;
  h->tensor.manager_ctx = h;
  h->tensor.deleter = delete_dlpack;
  // The capsule frees the tensor only if no consumer took it (which renames it "used_dltensor").
  return py::capsule(&h->tensor, "dltensor", [](PyObject* cap) {
    if (!PyCapsule_IsValid(cap, "dltensor")) return;
    auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
    if (t && t->deleter) t->deleter(t);
  });
}

class PyLoader {
 public:
  // metrics_port=: where the endpoint serves (None without one).
  std::optional<std::string> metrics_url() const {
    if (!opened_ || !opened_->metrics) return std::nullopt;
    return opened_->metrics->url();
  }
  PyLoader(std::vector<std::string> args, std::optional<std::string> state_json,
           std::uint32_t start_epoch, py::object transform) {
    auto opened = std::make_shared<Opened>();
    try {
      CLI::App app("feedline");
      app.add_option("url", opened->options.url)->required();
      fl::tools::add_run_options(app, opened->options);
      fl::tools::add_metrics_options(app, opened->options);
      std::reverse(args.begin(), args.end());  // CLI11 takes them last first
      app.parse(args);
    } catch (const CLI::ParseError& e) {
      raise_value(e.what());
    }
    if (!transform.is_none()) {
      if (!PyCallable_Check(transform.ptr())) throw py::type_error("transform must be callable");
      transform_ = std::make_shared<PyTransform>(std::move(transform));
    }
    // The set-up, the dataset's open and the pipeline's start block (a listing, manifests,
    // indexes: minutes over a large bucket), so they run off the GIL where Ctrl-C reaches them.
    struct Opening {
      std::shared_ptr<Opened> opened;
      std::unique_ptr<ld::Loader> loader;
      std::optional<fl::Error> error;
    };
    auto job = std::make_shared<Opening>();
    job->opened = opened;
    try {
      interruptible([job, token = stop_.get_token(), state_json, start_epoch, t = transform_] {
        Opened& o = *job->opened;
        o.setup = fl::tools::make_run_setup(o.options, token);
        std::optional<fl::tools::LoaderState> saved;
        if (state_json) saved = resume_from(o, *state_json);
        o.data = fl::tools::open_run_dataset(o.options, o.setup);
        if (saved) check_dataset(o, *saved);
        if (start_epoch > 0) start_at_epoch(o, start_epoch, state_json.has_value());
        o.setup.ctx.config.transform = t;
        // A Python loop keeps the last batch (and views of it) alive until next() returned the
        // new one: two with the caller, so that the prefetch stays what was asked.
        o.setup.ctx.config.caller_batches = 2;
        if (o.options.metrics_port) {
          auto ep = ld::MetricsEndpoint::start(o.options.metrics_bind,
                                               static_cast<std::uint16_t>(*o.options.metrics_port));
          if (!ep) throw fl::tools::UsageError(ep.error().what());
          o.metrics = *ep;
          o.setup.ctx.config.watchers.push_back(o.metrics);
        }
        auto loader = ld::Loader::open(*o.data.backend, o.data.dataset, o.setup.ctx.config);
        if (loader) {
          job->loader = std::move(*loader);
        } else {
          job->error = loader.error();
        }
      });
    } catch (const fl::tools::UsageError& e) {
      raise_value(e.what());
    } catch (const fl::tools::CommandError& e) {
      raise_error(e.error());
    }
    if (job->error) {
      if (job->error->code() == fl::Errc::kInvalidArgument) raise_value(job->error->what());
      raise_error(*job->error);
    }
    auto loader = std::move(job->loader);
    // The same sampler the loader runs, for where the run stands after each batch (state_dict).
    ld::SamplerConfig sc = opened->setup.ctx.config.sampler;
    sc.num_samples = opened->data.dataset.samples.size();
    sc.shard_starts.clear();  // counts only: the order is not needed
    auto sampler = ld::Sampler::create(sc);
    if (!sampler) raise_value(sampler.error().what());
    sampler_.emplace(std::move(*sampler));
    opened_ = std::move(opened);
    loader_ = std::move(loader);
  }

  ~PyLoader() { close(); }

  // The next batch, or None after the last one. Waits on this thread with the GIL released,
  // waking every 100 ms for Python's signal handlers (Ctrl-C interrupts within a second).
  std::optional<PyBatch> next() {
    if (!loader_) raise_value("the loader is closed");
    if (finished_) return std::nullopt;
    // The time since the last batch was handed over: the training step's compute.
    const auto compute = std::chrono::nanoseconds(handed_ns_ ? fl::now_ns() - handed_ns_ : 0);
    std::optional<fl::Result<ld::Batch>> r;
    for (bool first = true; !r; first = false) {
      if (!first && PyErr_CheckSignals() != 0) {  // Ctrl-C: stop the run, let it through
        with_loader([](ld::Loader& l) { l.stop(); });
        interrupted_ = true;
        finished_ = true;
        throw py::error_already_set();
      }
      const bool open = with_loader([&](ld::Loader& l) {
        if (first && compute.count() > 0) l.record_compute(compute);
        r = l.next_for(std::chrono::milliseconds(100));
      });
      if (!open) raise_value("the loader is closed");
    }
    handed_ns_ = fl::now_ns();
    if (!*r) {
      const fl::Error& e = r->error();
      // Every pool buffer held by live batches: the run goes on once some die (not sticky).
      finished_ = e.code() != fl::Errc::kResourceExhausted;
      if (e.code() == fl::Errc::kCancelled) return std::nullopt;
      if (transform_) raise_transform_error(e);
      raise_error(e);
    }
    if ((*r)->end()) {
      finished_ = true;
      handed_ns_ = 0;
      return std::nullopt;
    }
    ++delivered_;
    return PyBatch(opened_, std::move(**r));
  }

  // The report as `feedline run --json` writes it (a JSON text): the run's so far while it goes
  // on ("snapshot": true), its final one once it is over (or with final=true: that ends it).
  std::string report_json(bool final) {
    if (report_) return *report_;
    if (!loader_) raise_value("the loader is closed");
    ld::PipelineReport rep;
    const bool snapshot = !finished_ && !final;
    if (!with_loader([&](ld::Loader& l) { rep = snapshot ? l.snapshot() : l.report(); })) {
      if (report_) return *report_;  // closed meanwhile, by close(): its final report
      raise_value("the loader is closed");
    }
    if (snapshot && !rep.snapshot) return report_json(true);  // it ended meanwhile
    std::optional<fl::Error> mismatch;
    nlohmann::json doc = fl::tools::run_document(rep, opened_->setup, opened_->data.dataset,
                                                 snapshot ? nullptr : &mismatch);
    doc["resumed_from"] = fl::tools::resume_point_json(opened_->setup.ctx.config.sampler.resume);
    if (snapshot) return doc.dump();
    report_ = doc.dump();
    return *report_;
  }

  // Where the job stands: enough for Loader(..., state=) to deliver exactly the rest, on any rank
  // and with any number of ranks (ranks that step together, as DDP's do, save the same state).
  std::string state_json() const {
    if (!opened_) raise_value("the loader is closed");
    return fl::tools::format_loader_state(fl::tools::loader_state(
        opened_->setup.ctx.url, opened_->data.dataset, opened_->setup.ctx.config.sampler,
        sampler_->resume_point_after(delivered_)));
  }

  void stop() {
    with_loader([](ld::Loader& l) { l.stop(); });
  }

  // Stops the run and frees the pipeline; its report stays (report() works after close()).
  void close() {
    if (!loader_) return;
    if (!report_) {
      try {
        (void)report_json(true);
      } catch (const py::error_already_set&) {
      }
    }
    py::gil_scoped_release nogil;  // the pipeline's threads may want it while they end
    std::lock_guard consumer(consumer_mu_);
    if (loader_) loader_->stop();
    loader_.reset();
  }

  bool interrupted() const { return interrupted_; }

 private:
  // Runs f(loader) with the GIL released, under the lock that keeps the loader alive and its
  // consumer side one caller's at a time; false (f not run) once close() freed it.
  template <typename F>
  bool with_loader(F&& f) {
    py::gil_scoped_release nogil;
    std::lock_guard consumer(consumer_mu_);
    if (!loader_) return false;
    f(*loader_);
    return true;
  }

  // Runs f on a thread of its own while this one waits with the GIL released, waking every
  // 100 ms for Python's signal handlers. Ctrl-C asks f to stop (stop_: the open's waits end)
  // and raises KeyboardInterrupt once f ended, or after 2 s without it (f then finishes on its
  // own: it owns what it uses). f's exception is raised here.
  void interruptible(std::function<void()> f) {
    struct Shared {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      std::exception_ptr error;
    };
    auto sh = std::make_shared<Shared>();
    std::thread t([sh, f = std::move(f)] {
      std::exception_ptr error;
      try {
        f();
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard lock(sh->mu);
      sh->error = error;
      sh->done = true;
      sh->cv.notify_all();
    });
    auto wait = [&](std::chrono::milliseconds d) {
      py::gil_scoped_release nogil;
      std::unique_lock lock(sh->mu);
      return sh->cv.wait_for(lock, d, [&] { return sh->done; });
    };
    while (!wait(std::chrono::milliseconds(100))) {
      if (PyErr_CheckSignals() != 0) {
        stop_.request_stop();
        if (wait(std::chrono::seconds(2))) {
          t.join();
        } else {
          t.detach();
        }
        throw py::error_already_set();
      }
    }
    t.join();
    if (sh->error) std::rethrow_exception(sh->error);
  }

  // The exception transform= raised, raised again with a note naming the sample, its object and
  // offset (the C++ error's text); returns when the error was not the transform's.
  void raise_transform_error(const fl::Error& e) {
    py::object exc = transform_->take_error(e.message());
    if (!exc) return;
    if (py::hasattr(exc, "add_note")) {  // Python 3.11: the traceback shows the note
      exc.attr("add_note")(fmt::format(
          "feedline: in the transform of sample '{}' of {}{}", transform_->error_key(), e.object(),
          e.offset() ? fmt::format(" at offset {}", *e.offset()) : std::string()));
    }
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    throw py::error_already_set();
  }

  // Checks a state_dict against this loader's settings (all but rank and world size: the rest is
  // split over this run's ranks) and starts where it stopped. Returns the state (its dataset is
  // checked once the dataset is open).
  static fl::tools::LoaderState resume_from(Opened& o, const std::string& text) {
    auto s = fl::tools::parse_loader_state(text);
    if (!s) raise_value(s.error().message());
    ld::SamplerConfig& c = o.setup.ctx.config.sampler;
    if (auto why = fl::tools::loader_state_mismatch(*s, c)) raise_value(*why);
    // Where it stopped: the sampler checks the numbers against the dataset and settings.
    c.resume = s->resume;
    return std::move(*s);
  }

  // Starts the run at epoch `epoch` (feedline.torch's set_epoch: each pass a fresh Loader).
  static void start_at_epoch(Opened& o, std::uint32_t epoch, bool resumed) {
    ld::ResumePoint& rp = o.setup.ctx.config.sampler.resume;
    if (epoch >= o.setup.ctx.config.sampler.epochs) {
      raise_value(fmt::format("start_epoch {} is not below epochs {}", epoch,
                              o.setup.ctx.config.sampler.epochs));
    }
    if (resumed && rp.epoch < epoch) {
      raise_value(
          fmt::format("state: it stopped in epoch {}, before epoch {}: resume that one first",
                      rp.epoch, epoch));
    }
    if (!resumed || rp.epoch < epoch) rp = ld::ResumePoint{epoch, {}};
  }

  // The same samples: the same count, and the same listing (its fingerprint).
  static void check_dataset(const Opened& o, const fl::tools::LoaderState& s) {
    if (auto why = fl::tools::loader_state_dataset_mismatch(s, o.data.dataset, o.setup.ctx.url)) {
      raise_value(*why);
    }
  }

  std::stop_source stop_;
  std::shared_ptr<Opened> opened_;
  std::unique_ptr<ld::Loader> loader_;
  // The loader is used by one caller at a time, under this lock: Python threads may take turns
  // (one iterating, one logging report(), one closing it), and each waits for it with the GIL
  // released (never holding the GIL while it waits for this lock, or a thread inside next()
  // could not give it back).
  std::mutex consumer_mu_;
  std::optional<ld::Sampler> sampler_;
  std::shared_ptr<PyTransform> transform_;
  std::uint64_t delivered_ = 0;
  std::uint64_t handed_ns_ = 0;
  bool finished_ = false;
  bool interrupted_ = false;
  std::optional<std::string> report_;
};

// The names of `feedline run`'s flags (without "--"), for the Python layer's keyword check.
std::vector<std::string> run_flags() {
  fl::tools::RunOptions o;
  CLI::App app("feedline");
  fl::tools::add_run_options(app, o);
  fl::tools::add_metrics_options(app, o);
  std::vector<std::string> out;
  for (const CLI::Option* opt : app.get_options()) {
    for (const auto& name : opt->get_lnames()) out.push_back(name);
  }
  return out;
}

// feedline.decode_image(): one JPEG as the loader decodes it (image_size, crop as run's flags).
py::tuple decode_image(py::bytes data, unsigned image_size, const std::string& crop,
                       bool dct_scaling, std::uint64_t seed, std::uint32_t sample,
                       std::uint32_t epoch) {
  ld::ImageConfig c;
  c.decode = true;
  c.size = image_size;
  c.crop = image_size ? ld::Crop::kCenter : ld::Crop::kNone;
  if (!crop.empty()) {
    auto parsed = ld::parse_crop(crop);
    if (!parsed) raise_value(fmt::format("crop: {}", parsed.error().what()));
    c.crop = *parsed;
  }
  c.dct_scaling = dct_scaling;
  if (auto ok = ld::validate(c); !ok) raise_value(ok.error().what());
  const std::string_view bytes = data;  // valid while `data` lives
  std::vector<std::uint8_t> pixels;
  fl::Result<ld::JpegInfo> info = [&] {
    py::gil_scoped_release nogil;
    return ld::decode_jpeg(
        fl::ConstBytes(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()), c, seed,
        sample, epoch, &pixels);
  }();
  if (!info) raise_error(info.error());
  const ld::JpegInfo& i = *info;
  py::array_t<std::uint8_t> out({static_cast<py::ssize_t>(i.shape.height),
                                 static_cast<py::ssize_t>(i.shape.width),
                                 static_cast<py::ssize_t>(i.shape.channels)});
  std::memcpy(out.mutable_data(), pixels.data(), pixels.size());
  py::dict d;
  d["width"] = i.width;
  d["height"] = i.height;
  d["stored_width"] = i.stored_width;
  d["stored_height"] = i.stored_height;
  d["components"] = i.components;
  d["color_space"] = i.color_space;
  d["progressive"] = i.progressive;
  d["orientation"] = i.orientation;
  d["crop"] = py::make_tuple(i.crop.x, i.crop.y, i.crop.width, i.crop.height);
  d["scale"] = py::make_tuple(i.scale_eighths, 8);
  return py::make_tuple(out, d);
}

}  // namespace

PYBIND11_MODULE(_feedline, mod) {
  mod.doc() = "feedline's native module (use the feedline package)";
  static py::exception<fl::tools::CommandError> error(mod, "Error", PyExc_OSError);
  g_error = error.ptr();

  py::class_<PyBatch>(mod, "_Batch")
      .def("__len__", &PyBatch::size)
      .def_property_readonly("epoch", &PyBatch::epoch)
      .def_property_readonly("index", &PyBatch::index)
      .def_property_readonly("digest", &PyBatch::digest)
      .def_property_readonly("nbytes", &PyBatch::nbytes)
      .def_property_readonly("keys", &PyBatch::keys)
      .def_property_readonly("transformed", &PyBatch::transformed)
      .def(
          "member",
          [](py::object self, const std::string& suffix) {
            const PyBatch& b = self.cast<const PyBatch&>();
            const auto members = b.select(suffix);
            const std::uint8_t* base = b.host();
            py::list out(members.size());
            for (std::size_t i = 0; i < members.size(); ++i) {
              out[i] = PyBatch::view(self, base, members[i]->offset, members[i]->size,
                                     members[i]->shape);
            }
            return out;
          },
          py::arg("suffix"))
      .def(
          "padded",
          [](py::object self, const std::string& suffix) {
            const PyBatch& b = self.cast<const PyBatch&>();
            const auto members = b.select(suffix);
            const std::uint8_t* base = b.host();
            std::uint64_t width = 0;
            for (const auto* m : members) width = std::max(width, m->size);
            py::array_t<std::uint8_t> out(
                {static_cast<py::ssize_t>(members.size()), static_cast<py::ssize_t>(width)});
            py::array_t<std::int64_t> lengths(static_cast<py::ssize_t>(members.size()));
            auto* dst = out.mutable_data();
            auto* len = lengths.mutable_data();
            {
              py::gil_scoped_release nogil;
              for (std::size_t i = 0; i < members.size(); ++i) {
                const auto* m = members[i];
                std::memcpy(dst + i * width, base + m->offset, m->size);
                std::memset(dst + i * width + m->size, 0, width - m->size);
                len[i] = static_cast<std::int64_t>(m->size);
              }
            }
            return py::make_tuple(out, lengths);
          },
          py::arg("suffix"))
      .def(
          "dlpack",
          [](py::object self, const std::string& suffix) -> py::object {
            const PyBatch& b = self.cast<const PyBatch&>();
            const auto members = b.select(suffix);
            const auto st = PyBatch::strided(members);
            if (!st) return py::none();  // sizes differ: the caller pads (one copy)
            const auto [base, device] = b.dlpack_base();
            return dlpack_capsule(self, base + st->first, device, members.size(), st->width,
                                  st->stride, members[0]->shape);
          },
          py::arg("suffix"))
      .def("dlpack_device", [](const PyBatch& b) {
        const auto [base, device] = b.dlpack_base();
        (void)base;
        return py::make_tuple(static_cast<int>(device.device_type), device.device_id);
      });

  py::class_<PyLoader>(mod, "_Loader")
      .def(py::init<std::vector<std::string>, std::optional<std::string>, std::uint32_t,
                    py::object>(),
           py::arg("args"), py::arg("state") = py::none(), py::arg("start_epoch") = 0,
           py::arg("transform") = py::none())
      .def("next", &PyLoader::next)
      .def("report_json", &PyLoader::report_json, py::arg("final") = false)
      .def("state_json", &PyLoader::state_json)
      .def_property_readonly("metrics_url", &PyLoader::metrics_url)
      .def("stop", &PyLoader::stop)
      .def("close", &PyLoader::close)
      .def_property_readonly("interrupted", &PyLoader::interrupted);

  mod.def("_run_flags", &run_flags);
  mod.def("_decode_image", &decode_image, py::arg("data"), py::arg("image_size") = 0,
          py::arg("crop") = "", py::arg("dct_scaling") = true, py::arg("seed") = 0,
          py::arg("sample") = 0, py::arg("epoch") = 0);
}
