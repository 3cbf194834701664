// feedline._feedline: the native half of the Python package. One more user of the C++ API, as
// the CLI is, and of the library's only (it links no part of the CLI): the keywords are the
// settings table's (feedline/loader/settings.hpp), the library's run plan (run_plan.hpp) checks
// them and makes a LoaderConfig, its errors naming the keywords, feedline::loader::Loader runs the
// pipeline, and the report is the library's document (feedline/loader/report_json.hpp), whose
// schema `feedline run --json` writes too.
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
#include <unistd.h>

#include <fmt/format.h>

#include <dlpack/dlpack.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "feedline/core/clock.hpp"
#include "feedline/core/redact.hpp"
#include "feedline/core/text.hpp"
#include "feedline/loader/chrome_trace.hpp"
#include "feedline/loader/html_page.hpp"
#include "feedline/loader/image.hpp"
#include "feedline/loader/job_report.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/loader/metrics.hpp"
#include "feedline/loader/output_file.hpp"
#include "feedline/loader/report_json.hpp"
#include "feedline/loader/run_plan.hpp"
#include "feedline/loader/sampler.hpp"
#include "feedline/loader/settings.hpp"
#include "feedline/loader/state.hpp"
#include "feedline/loader/timeline.hpp"
#include "feedline/loader/trace.hpp"

namespace py = pybind11;
namespace fl = feedline;
namespace ld = feedline::loader;

namespace {

PyObject* g_error = nullptr;  // feedline.Error (an OSError)
// The C++ side of feedline.Error, for pybind11's registration (raise_error raises it).
class ModuleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A name from storage (a key, a member's name) as os.fsdecode() makes it: Linux names and S3
// keys are bytes, and one that is not UTF-8 keeps each such byte as a lone surrogate
// (surrogateescape), so that os.fsencode() gives the name back.
py::str name_str(std::string_view s) {
  PyObject* o =
      PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

// A library message with {name} placeholders, naming the settings as Python's keywords.
std::string keyword_words(std::string_view message) {
  return ld::render_setting_names(message, ld::SettingVocabulary::kPython);
}

// A message, which may quote such a name, as text that prints anywhere (\xe9 for those bytes).
py::str message_str(std::string_view s) {
  PyObject* o =
      PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "backslashreplace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

// A ValueError's (KeyError's, RuntimeError's) message, thrown from any thread (the opening
// thread's too) and raised in Python by the module's translator, with message_str's text.
class PythonError : public std::runtime_error {
 public:
  PythonError(PyObject* type, std::string_view what)
      : std::runtime_error(std::string(what)), type_(type) {}
  PyObject* type() const noexcept { return type_; }

 private:
  PyObject* type_;
};

[[noreturn]] void raise_python(PyObject* type, std::string_view what) {
  throw PythonError(type, what);
}

[[noreturn]] void raise_error(const fl::Error& e) {
  const int err = e.code() == fl::Errc::kNotFound            ? ENOENT
                  : e.code() == fl::Errc::kPermissionDenied  ? EACCES
                  : e.code() == fl::Errc::kResourceExhausted ? ENOBUFS
                                                             : EIO;
  py::object exc =
      py::reinterpret_borrow<py::object>(g_error)(err, message_str(keyword_words(e.what())));
  PyErr_SetObject(g_error, exc.ptr());
  throw py::error_already_set();
}

[[noreturn]] void raise_value(std::string_view what) { raise_python(PyExc_ValueError, what); }

// The process's environment, for the run plan: the launcher's rank and world size (torchrun's
// RANK/WORLD_SIZE, Open MPI's, SLURM's), the AWS variables and files, as `feedline run` reads them.
fl::storage::EnvLookup process_env() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

// fork(): the child has none of its parent's threads, so a loader made before it (and its
// batches, whose buffers go back to its pool) is the parent's. The child may close it and exit,
// which leave what it holds as it is, and is refused any other use of it.
[[noreturn]] void raise_forked(pid_t owner) {
  raise_python(PyExc_RuntimeError,
               fmt::format("this Loader was made by process {} before a fork(): its pipeline's "
                           "threads are not in this process ({}). Make a new Loader in this "
                           "process (close() and the exit are safe)",
                           owner, ::getpid()));
}

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

// The bytes a transform's result holds, as Python tells them: an array's nbytes (numpy), a
// tensor's elements (torch), a buffer's length (bytes, bytearray, memoryview), what the items of
// a tuple, list or dict hold (two levels down, the first 1024 items), else sys.getsizeof().
// Counted in the loader's memory budget (TransformCall::result_bytes). With the GIL held.
std::uint64_t held_bytes(py::handle o, int depth = 0) {
  PyObject* p = o.ptr();
  if (PyBytes_Check(p)) return static_cast<std::uint64_t>(PyBytes_GET_SIZE(p));
  if (PyByteArray_Check(p)) return static_cast<std::uint64_t>(PyByteArray_GET_SIZE(p));
  try {
    if (py::hasattr(o, "nbytes")) {
      py::object n = o.attr("nbytes");
      if (PyLong_Check(n.ptr())) return n.cast<std::uint64_t>();
    }
    if (py::hasattr(o, "element_size") && py::hasattr(o, "numel")) {
      return o.attr("element_size")().cast<std::uint64_t>() *
             o.attr("numel")().cast<std::uint64_t>();
    }
    if (PyObject_CheckBuffer(p)) {
      Py_buffer view;
      if (PyObject_GetBuffer(p, &view, PyBUF_SIMPLE) == 0) {
        const auto n = static_cast<std::uint64_t>(view.len);
        PyBuffer_Release(&view);
        return n;
      }
      PyErr_Clear();
    }
    std::uint64_t n = static_cast<std::uint64_t>(
        py::module_::import("sys").attr("getsizeof")(o).cast<std::uint64_t>());
    if (depth < 2 && (PyTuple_Check(p) || PyList_Check(p) || PyDict_Check(p))) {
      std::size_t items = 0;
      const py::object each =
          PyDict_Check(p) ? o.attr("values")() : py::reinterpret_borrow<py::object>(o);
      for (py::handle item : each) {
        if (++items > 1024) break;
        n += held_bytes(item, depth + 1);
      }
    }
    return n;
  } catch (py::error_already_set&) {  // a strange object: counted as nothing
    return 0;
  } catch (py::cast_error&) {
    return 0;
  }
}

class PyTransform;
// The transform whose call this thread is in (a decode thread's, while fn runs): its loader's
// next(), report() and close() would wait for this very thread.
thread_local const PyTransform* t_in_transform = nullptr;

// transform=fn on the decode threads (feedline/loader/transform.hpp). Each call takes the GIL
// for fn only, and reports how long it waited for it. fn gets a dict: "__key__" and each member's
// decoded bytes (a copy, so fn may keep it) under the member's name after the sample's key, as
// WebDataset names them (".bin", ".cls"; a zstd member's without ".zst": the bytes are decoded);
// what it returns rides in the batch (Batch.transformed), its bytes counted in the memory
// budget. The first exception fn raises is kept, to be raised again from the loop with the
// sample named. close() makes later calls return at once without fn; wait_idle() waits (a
// while) for those under way.
class PyTransform final : public ld::SampleTransform {
 public:
  explicit PyTransform(py::object fn) : fn_(std::move(fn)) {}
  ~PyTransform() override {
    if (finalizing()) {  // leaked rather than touched: the interpreter is going away
      fn_.release();
      for (auto& kept : errors_) kept.second.release();
      return;
    }
    py::gil_scoped_acquire gil;
    fn_ = py::object();
    errors_.clear();
  }

  fl::Result<ld::TransformResult> apply(const ld::TransformInput& in,
                                        ld::TransformCall& call) override {
    InFlight counted(*this);  // declared before the GIL is taken: ends after it is let go
    if (closed_.load() || finalizing()) return cancelled();
    const std::uint64_t asked = fl::now_ns();
    py::gil_scoped_acquire gil;
    call.lock_wait = std::chrono::nanoseconds(fl::now_ns() - asked);
    if (closed_.load()) return cancelled();  // closed while this thread waited for the GIL
    try {
      py::dict sample;
      sample["__key__"] = name_str(in.key);
      for (const ld::TransformMember& m : in.members) {
        // WebDataset's keys: the name after the sample's key (".bin" of "000123.bin.zst").
        std::string_view name = decoded_name(m.name);
        if (name.starts_with(in.key)) name.remove_prefix(in.key.size());
        sample[name_str(name)] =
            py::bytes(reinterpret_cast<const char*>(m.bytes.data()), m.bytes.size());
      }
      py::object out;
      {
        const PyTransform* outer = std::exchange(t_in_transform, this);
        struct Restore {
          const PyTransform* outer;
          ~Restore() { t_in_transform = outer; }
        } restore{outer};
        out = fn_(sample);
      }
      if (out.is_none()) return ld::TransformResult();
      call.result_bytes = held_bytes(out);
      PyObject* held = out.release().ptr();
      return ld::TransformResult(held, [](const void* p) {
        if (finalizing()) return;      // see finalizing()
        py::gil_scoped_acquire again;  // the last batch holding it may die on any thread
        Py_DECREF(static_cast<PyObject*>(const_cast<void*>(p)));
      });
    } catch (py::error_already_set& e) {
      std::string what = e.what();
      if (errors_.size() < kKeptErrors) errors_.emplace_back(std::string(in.key), e.value());
      return fl::fail(fl::Errc::kInvalidArgument, std::move(what));
    }
  }

  // No call runs fn from now on; those under way go on (wait_idle()).
  void close() noexcept { closed_.store(true); }
  // Waits (without the GIL) at most `timeout` for the calls under way to end: true once none is.
  bool wait_idle(std::chrono::milliseconds timeout) {
    py::gil_scoped_release nogil;
    std::unique_lock lock(mu_);
    return idle_.wait_for(lock, timeout, [&] { return in_flight_ == 0; });
  }

  // The exception fn raised for the sample the run's error names, with its key (with the GIL
  // held); none when it is not one of those kept.
  std::pair<std::string, py::object> take_error(const std::string& message) {
    for (auto it = errors_.begin(); it != errors_.end(); ++it) {
      if (message.find(fmt::format("sample '{}'", it->first)) == std::string::npos) continue;
      auto out = std::move(*it);
      errors_.erase(it);
      return out;
    }
    return {};
  }

 private:
  struct InFlight {
    PyTransform& t;
    explicit InFlight(PyTransform& owner) : t(owner) {
      std::lock_guard lock(t.mu_);
      ++t.in_flight_;
    }
    ~InFlight() {
      std::lock_guard lock(t.mu_);
      if (--t.in_flight_ == 0) t.idle_.notify_all();
    }
  };
  static fl::Result<ld::TransformResult> cancelled() {
    return fl::fail(fl::Errc::kCancelled, "the loader was closed");
  }

  py::object fn_;
  // The exceptions fn raised, by sample key (the first few: decode threads fail samples in any
  // order, and the run's error is the first to reach it). Guarded by the GIL.
  static constexpr std::size_t kKeptErrors = 16;
  std::vector<std::pair<std::string, py::object>> errors_;
  std::atomic<bool> closed_{false};
  std::mutex mu_;
  std::condition_variable idle_;
  unsigned in_flight_ = 0;  // calls under way (under mu_)
};

// What outlives the Loader for its batches: the backend and the dataset they were read from.
struct Opened {
  std::string url;
  ld::LoaderSettings settings;
  ld::RunPlan setup;
  ld::OpenedRun data;
  std::shared_ptr<ld::MetricsEndpoint> metrics;  // metrics_port=: until close()
};

// html= and trace=: the files a run writes for people and viewers, written once the pipeline's
// threads are done (they record into the timeline and the trace): at close(), which the end of
// the pass calls, or by the thread that frees a pipeline left to end on its own.
struct Outputs {
  ld::OutputFile html;
  ld::OutputFile trace;
  std::string about;  // the trace's otherData: the caller, the URL (JSON text)
  std::shared_ptr<ld::Timeline> timeline;
  std::shared_ptr<ld::TraceLog> log;
  std::vector<std::string> secrets;  // the URL's and the credentials': never written
  bool written = false;

  bool enabled() const { return html.enabled() || trace.enabled(); }

  std::string scrub(std::string_view text) const { return fl::mask_secrets(text, secrets); }

  // Writes both (once); the first error, naming its file. Without the GIL: it may take seconds.
  std::optional<fl::Error> write(const std::string& report, const fl::Histogram* latency) {
    if (written) return std::nullopt;
    written = true;
    std::optional<fl::Error> first;
    if (html.enabled()) {
      ld::HtmlPageInputs in;
      in.command = "feedline.Loader";
      in.report_how = "Loader.report()";
      in.run_json = report;
      in.timeline = timeline ? timeline->finish() : std::vector<ld::TimelinePoint>{};
      in.read_latency = latency;
      auto page = ld::html_page(in);
      auto w = page ? html.commit(scrub(*page), "the HTML page (html=)")
                    : fl::Result<void>(fl::fail(page.error()));
      if (!w) first = w.error();
    }
    if (trace.enabled() && log) {
      fl::Result<void> made;
      auto w = trace.commit_streamed(
          [&](const ld::OutputFile::Sink& sink) {
            made = ld::write_chrome_trace(*log, about, sink,
                                          [this](std::string_view t) { return scrub(t); });
          },
          "the trace (trace=)");
      if (!made && !first) first = made.error();
      if (!w && !first) first = w.error();
    }
    return first;
  }
};

class PyBatch {
 public:
  PyBatch(std::shared_ptr<const Opened> opened, ld::Batch b, pid_t owner)
      : opened_(std::move(opened)), batch_(std::move(b)), owner_(owner) {}
  PyBatch(PyBatch&&) noexcept = default;
  PyBatch& operator=(PyBatch&&) = delete;
  ~PyBatch() {
    // A fork()ed child's copy: handing the buffer back would touch the parent's pool, whose
    // lock a thread that is not here may have held at the fork. Left as it is.
    if (::getpid() != owner_ && !batch_.end()) {
      new ld::Batch(std::move(batch_));
      new std::shared_ptr<const Opened>(std::move(opened_));
    }
  }

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

  py::list keys() const {
    py::list out(size());
    std::size_t i = 0;
    for (const auto& s : batch_.samples()) out[i++] = name_str(s.key);
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
        raise_python(PyExc_KeyError,
                     fmt::format("sample '{}' has no member {}(its members:{})", s.key,
                                 suffix.empty() ? std::string("of its own: name one by its ending ")
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
  pid_t owner_;  // the process it was made in
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

class PyLoader;
// The loaders not yet destroyed (under the GIL), for close_all_loaders().
std::unordered_set<PyLoader*>& live_loaders() {
  static auto* live = new std::unordered_set<PyLoader*>;  // never destroyed: used at exit
  return *live;
}

class PyLoader {
 public:
  // metrics_port=: where the endpoint serves (None without one).
  std::optional<std::string> metrics_url() const {
    if (!opened_ || !opened_->metrics) return std::nullopt;
    return opened_->metrics->url();
  }
  // url: the dataset (bytes: Linux names are bytes); settings: (name, value) pairs of the
  // library's table, as text (feedline/__init__.py makes them from the keywords' Python values).
  // html, trace: html= and trace= (Outputs), checked now; about: the trace's otherData.
  PyLoader(std::string url, std::vector<std::pair<std::string, std::string>> settings,
           std::optional<std::string> state_json, std::uint32_t start_epoch, py::object transform,
           std::optional<std::string> html, std::optional<std::string> trace,
           std::uint64_t trace_events, std::string about) {
    auto opened = std::make_shared<Opened>();
    opened->url = std::move(url);
    if (html || trace) outputs_ = prepare_outputs(opened->url, html, trace, trace_events, about);
    for (const auto& [name, value] : settings) {
      const ld::Setting* w = ld::find_setting(name);
      if (!w || w->scope != ld::SettingScope::kLoader) {
        raise_python(PyExc_TypeError,
                     fmt::format("Loader() got an unexpected keyword argument '{}'", name));
      }
      if (auto r = ld::set_setting(opened->settings, *w, value); !r)
        raise_value(fmt::format("{}: {}", name, r.error().message()));
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
      std::optional<fl::Error> open_error;  // the storage's or the dataset's: feedline.Error
      std::optional<fl::Error> error;       // the loader's
      std::vector<std::string> notes;       // for stderr, once open
    };
    auto job = std::make_shared<Opening>();
    job->opened = opened;
    interruptible([job, token = stop_.get_token(), state_json, start_epoch, t = transform_,
                   outputs = outputs_] {
      Opened& o = *job->opened;
      auto plan = ld::plan_run(o.settings, o.url, process_env(), token);
      if (!plan) raise_value(keyword_words(plan.error().message()));
      o.setup = std::move(*plan);
      for (const std::string& n : o.setup.notes) job->notes.push_back(keyword_words(n));
      if (outputs) {
        outputs->secrets = fl::url_secrets(o.url);
        for (const std::string& s : o.setup.secrets) outputs->secrets.push_back(s);
        if (outputs->timeline) o.setup.ctx.config.watchers.push_back(outputs->timeline);
        o.setup.ctx.config.trace = outputs->log;
      }
      std::optional<ld::LoaderState> saved;
      if (state_json) saved = resume_from(o, *state_json);
      auto run = ld::open_run(o.setup, o.url);
      if (!run) {
        job->open_error = run.error();
        return;
      }
      o.data = std::move(*run);
      for (const std::string& n : o.data.notes) job->notes.push_back(keyword_words(n));
      for (const std::string& n : o.data.dataset.notes) job->notes.push_back(n);
      for (const std::string& why : o.data.dataset.skipped)
        job->notes.push_back(fmt::format("skipped (on_error='skip'): {}", why));
      if (saved) check_dataset(o, *saved);
      if (start_epoch > 0) start_at_epoch(o, start_epoch, state_json.has_value());
      o.setup.ctx.config.transform = t;
      // A Python loop keeps the last batch (and views of it) alive until next() returned the
      // new one: two with the caller, so that the prefetch stays what was asked.
      o.setup.ctx.config.caller_batches = 2;
      if (o.settings.metrics_port) {
        auto ep = ld::MetricsEndpoint::start(o.settings.metrics_bind,
                                             static_cast<std::uint16_t>(*o.settings.metrics_port));
        if (!ep) raise_value(ep.error().what());
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
    print_notes(job->notes);
    if (job->open_error) raise_error(*job->open_error);
    if (job->error) {
      if (job->error->code() == fl::Errc::kInvalidArgument) raise_value(job->error->what());
      raise_error(*job->error);
    }
    auto loader = std::move(job->loader);
    batches_per_epoch_ = loader->batches_per_epoch();  // len(): kept after close()
    at_ = opened->setup.ctx.config.sampler.resume;     // where it starts
    opened_ = std::move(opened);
    loader_ = std::move(loader);
    live_loaders().insert(this);
  }

  ~PyLoader() {
    live_loaders().erase(this);
    if (!loader_) return;
    // In a fork()ed child, and while the interpreter finalizes (close_all_loaders() closed
    // every loader before, unless one was made after it ran): a pipeline thread waiting for the
    // GIL would be ended by Python as the GIL is let go for a join, so nothing is joined.
    if (!made_here() || finalizing()) {
      abandon();
      return;
    }
    try {
      if (in_own_transform()) {  // its last reference dropped by its own transform
        stop();
        transform_->close();
        reap(take_loader());
        stop_metrics();
      } else {
        close_now();
      }
    } catch (...) {  // nothing may leave a destructor; the loader is freed all the same
    }
  }

  // The next batch, or None after the last one. Waits on this thread with the GIL released,
  // waking every 100 ms for Python's signal handlers (Ctrl-C interrupts within a second).
  std::optional<PyBatch> next() {
    if (!made_here()) raise_forked(owner_);
    refuse_in_own_transform("next()");
    if (!loader_) raise_value("the loader is closed");
    if (finished_) return std::nullopt;
    // The time since the last batch was handed over: the training step's compute.
    const auto compute = std::chrono::nanoseconds(handed_ns_ ? fl::now_ns() - handed_ns_ : 0);
    std::optional<fl::Result<ld::Batch>> r;
    ld::ResumePoint at;  // where the run stands with this batch handed out
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
        if (r && *r && !(*r)->end()) at = l.resume_point();
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
      // html=, trace=: written now that the pass is over, once its threads are done.
      if (outputs_) close();
      return std::nullopt;
    }
    at_ = std::move(at);
    return PyBatch(opened_, std::move(**r), owner_);
  }

  // The report, in the schema of `feedline run --json` (a JSON text): the run's so far while it
  // goes on ("snapshot": true), its final one once it is over (or with final=true: that ends it).
  std::string report_json(bool final) {
    if (report_) return *report_;
    if (!made_here()) raise_forked(owner_);
    refuse_in_own_transform("report()");
    if (!loader_) raise_value("the loader is closed");
    ld::PipelineReport rep;
    const bool snapshot = !finished_ && !final;
    if (!with_loader([&](ld::Loader& l) { rep = snapshot ? l.snapshot() : l.report(); })) {
      if (report_) return *report_;  // closed meanwhile, by close(): its final report
      raise_value("the loader is closed");
    }
    if (snapshot && !rep.snapshot) return report_json(true);  // it ended meanwhile
    std::optional<fl::Error> mismatch;
    std::string doc = report_document(rep, snapshot ? nullptr : &mismatch);
    if (snapshot) return doc;
    latency_ = rep.io.stats.lat;
    report_ = std::move(doc);
    return *report_;
  }

  // Where the job stands: enough for Loader(..., state=) to deliver exactly the rest, on any rank
  // and with any number of ranks (ranks that step together, as DDP's do, save the same state).
  std::string state_json() const {
    if (!opened_) raise_value("the loader is closed");
    return ld::format_loader_state(ld::loader_state(opened_->setup.ctx.url, opened_->data.dataset,
                                                    opened_->setup.ctx.config.sampler, at_));
  }

  void stop() {
    if (!made_here()) raise_forked(owner_);
    with_loader([](ld::Loader& l) { l.stop(); });
  }

  // Stops the run and frees the pipeline, and the metrics endpoint; the report stays (report()
  // works after close()). A transform call under way is waited for a moment (kTransformGrace),
  // not more: the pipeline is then freed on a thread of its own once the call returns, and the
  // report is the run's figures at close() ("snapshot": true). In a fork()ed child: forgets it.
  void close() {
    if (!loader_) return;
    if (!made_here()) {
      abandon();
      return;
    }
    refuse_in_own_transform("close()");
    if (auto e = close_now()) raise_error(*e);
  }

  bool interrupted() const { return interrupted_; }
  std::uint64_t batches_per_epoch() const { return batches_per_epoch_; }

 private:
  // How long close() waits for a transform call under way to return before it leaves the
  // pipeline to end on its own: Ctrl-C ends a loop within a second whatever the transform does.
  static constexpr std::chrono::milliseconds kTransformGrace{300};

  bool made_here() const { return ::getpid() == owner_; }
  bool in_own_transform() const { return transform_ && t_in_transform == transform_.get(); }

  // A transform that used its own loader would wait for the thread it runs on.
  void refuse_in_own_transform(const char* what) const {
    if (!in_own_transform()) return;
    raise_python(PyExc_RuntimeError,
                 fmt::format("a transform called {} on its own loader: it runs on the "
                             "loader's decode threads, which {} would wait for. Use the loader "
                             "from the loop that iterates it",
                             what, what));
  }

  // The first error writing html= or trace=, if any (the rest is closed all the same).
  std::optional<fl::Error> close_now() {
    with_loader([](ld::Loader& l) { l.stop(); });
    if (transform_) transform_->close();  // after stop(): what it cancels fails nothing
    const bool idle = !transform_ || transform_->wait_idle(kTransformGrace);
    if (!report_) {
      try {
        if (idle) {
          (void)report_json(true);
        } else {
          closed_report();
        }
      } catch (...) {  // no report is no reason not to close
      }
    }
    std::unique_ptr<ld::Loader> loader = take_loader();
    std::optional<fl::Error> error;
    if (idle) {
      py::gil_scoped_release nogil;  // the pipeline's threads may want it while they end
      loader.reset();
      if (outputs_ && report_) error = outputs_->write(*report_, latency_ ? &*latency_ : nullptr);
    } else {
      reap(std::move(loader));
    }
    stop_metrics();
    return error;
  }

  // The report of a run closed while a transform call was under way: its figures so far
  // (snapshot() waits for nothing), as stopped.
  void closed_report() {
    ld::PipelineReport rep;
    if (!with_loader([&](ld::Loader& l) { rep = l.snapshot(); })) return;
    if (rep.snapshot) {
      rep.interrupted = true;
      rep.verdict.evidence =
          "closed while a transform call was still running: the run's figures at close(), "
          "without the verdict";
    }
    report_ = report_document(rep, nullptr);
  }

  std::unique_ptr<ld::Loader> take_loader() {
    py::gil_scoped_release nogil;
    std::lock_guard consumer(consumer_mu_);
    return std::move(loader_);
  }

  // Frees a stopped pipeline on a thread of its own, once the transform call under way returns
  // and its threads end: what it reads (the backend, the dataset) goes with it.
  // html= and trace= are written then, by that thread (an error said on stderr).
  void reap(std::unique_ptr<ld::Loader> loader) {
    if (!loader) return;
    std::thread([loader = std::move(loader), opened = opened_, t = transform_, out = outputs_,
                 report = report_.value_or(std::string())]() mutable {
      loader.reset();
      if (!out) return;
      if (auto e = out->write(report, nullptr)) {
        std::fprintf(stderr, "feedline: error: %s\n", fl::printable(e->what()).c_str());
      }
    }).detach();
  }

  // metrics_port=: the endpoint closes with the loader (a pipeline being reaped keeps serving
  // its last figures until it ends).
  void stop_metrics() {
    if (!opened_) return;
    opened_->metrics.reset();
    opened_->setup.ctx.config.watchers.clear();
  }

  // In a fork()ed child (raise_forked): leaves the parent's pipeline, backend and transform as
  // they are, never freed: its threads are not here to join, its locks may be held.
  void abandon() noexcept {
    (void)loader_.release();
    if (opened_) new std::shared_ptr<Opened>(std::move(opened_));
    if (transform_) new std::shared_ptr<PyTransform>(std::move(transform_));
  }

  // The library's report document (feedline/loader/report_json.hpp): the schema of `feedline
  // run --json`, the knobs in the library's words (io_depth=64 -> 128), and where a resumed run
  // started ("resumed_from"). *mismatch (where given): gen's digest not matched.
  std::string report_document(const ld::PipelineReport& rep,
                              std::optional<fl::Error>* mismatch) const {
    const ld::RunContext& ctx = opened_->setup.ctx;
    ld::ReportOptions o;
    o.url = ctx.url;
    o.compute_time = ctx.compute_time;
    o.au_target = ctx.au_target;
    o.potential_caching = ctx.potential_caching;
    o.host_memory_bytes = ctx.host_memory_bytes;
    o.resumed_from = &ctx.config.sampler.resume;
    o.mismatch = mismatch;
    o.names = ld::SettingVocabulary::kPython;
    return ld::report_json(rep, opened_->data.dataset, ctx.config, o);
  }
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
    auto [key, exc] = transform_->take_error(e.message());
    if (!exc) return;
    if (py::hasattr(exc, "add_note")) {  // Python 3.11: the traceback shows the note
      exc.attr("add_note")(message_str(
          fmt::format("feedline: in the transform of sample '{}' of {}{}", key, e.object(),
                      e.offset() ? fmt::format(" at offset {}", *e.offset()) : std::string())));
    }
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    throw py::error_already_set();
  }

  // Checks a state_dict against this loader's settings (all but rank and world size: the rest is
  // split over this run's ranks) and starts where it stopped. Returns the state (its dataset is
  // checked once the dataset is open).
  // html= and trace=: checked against the dataset and each other, and their files made ready
  // (ValueError naming the keyword and the path).
  static std::shared_ptr<Outputs> prepare_outputs(const std::string& url,
                                                  const std::optional<std::string>& html,
                                                  const std::optional<std::string>& trace,
                                                  std::uint64_t trace_events, std::string about) {
    if (auto r = ld::check_output_paths({{"html=", &html}, {"trace=", &trace}}, url); !r)
      raise_value(r.error().what());
    auto out = std::make_shared<Outputs>();
    if (html) {
      auto f = ld::OutputFile::prepare(*html, "html=");
      if (!f) raise_value(f.error().what());
      out->html = std::move(*f);
      out->timeline = std::make_shared<ld::Timeline>();
    }
    if (trace) {
      auto f = ld::OutputFile::prepare(*trace, "trace=");
      if (!f) raise_value(f.error().what());
      out->trace = std::move(*f);
      out->log = std::make_shared<ld::TraceLog>(ld::trace_options_for(trace_events));
      out->about = std::move(about);
    }
    return out;
  }

  static ld::LoaderState resume_from(Opened& o, const std::string& text) {
    auto s = ld::parse_loader_state(text);
    if (!s) raise_value(s.error().message());
    ld::SamplerConfig& c = o.setup.ctx.config.sampler;
    if (auto why = ld::loader_state_mismatch(*s, c)) raise_value(*why);
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

  // What the user should know about the run (insecure TLS, objects skipped, the dataset's notes),
  // on stderr as `feedline run` writes them (with the GIL held).
  static void print_notes(const std::vector<std::string>& notes) {
    if (notes.empty()) return;
    py::object err = py::module_::import("sys").attr("stderr");
    if (err.is_none()) return;
    for (const std::string& n : notes)
      err.attr("write")(message_str("feedline: note: " + fl::printable(keyword_words(n)) + "\n"));
  }

  // The same samples: the same count, and the same listing (its fingerprint).
  static void check_dataset(const Opened& o, const ld::LoaderState& s) {
    if (auto why = ld::loader_state_dataset_mismatch(s, o.data.dataset, o.setup.ctx.url)) {
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
  std::shared_ptr<PyTransform> transform_;
  // Where the run stands after the batches handed to Python (the loader's resume_point(), taken
  // with each batch): state_dict() answers from it under the GIL, also once the loader is closed.
  ld::ResumePoint at_;
  std::uint64_t handed_ns_ = 0;
  pid_t owner_ = ::getpid();  // the process that made it (fork: raise_forked)
  bool finished_ = false;
  bool interrupted_ = false;
  std::uint64_t batches_per_epoch_ = 0;  // this rank's, of one whole epoch
  std::optional<std::string> report_;
  std::optional<fl::Histogram> latency_;  // the final report's read latency (html=)
  std::shared_ptr<Outputs> outputs_;      // html=, trace=: null without either
};

// atexit (the package registers it): closes every loader still open while the interpreter is
// whole. Freed during its finalization instead, a pipeline thread waiting for the GIL to run a
// transform would be ended by Python mid-call (pthread_exit through C++ frames): a crash at exit.
void close_all_loaders() {
  const std::vector<PyLoader*> open(live_loaders().begin(), live_loaders().end());
  for (PyLoader* l : open) {
    if (!live_loaders().contains(l)) continue;  // gone meanwhile
    try {
      l->close();
    } catch (const py::error_already_set&) {
    }
  }
}

// The library's settings table (feedline/loader/settings.hpp), for the Python layer's keywords,
// their signature and their help: one dict per setting.
py::list settings_table() {
  static constexpr const char* kTypes[] = {"flag",     "count",  "number", "size",
                                           "duration", "choice", "path",   "text"};
  py::list out;
  for (const ld::Setting& w : ld::settings()) {
    py::dict d;
    d["name"] = std::string(w.name);
    d["type"] = kTypes[static_cast<int>(w.type)];
    d["section"] = std::string(w.section);
    d["unit"] = std::string(w.unit);
    d["help"] = ld::render_setting_names(w.help, ld::SettingVocabulary::kPython);
    d["help_cli"] = ld::render_setting_names(w.help, ld::SettingVocabulary::kCommandLine);
    d["default"] = ld::setting_default(w);
    d["range"] = ld::setting_range(w);
    d["min"] = w.min;
    d["max"] = w.max;
    py::list choices;
    for (std::string_view c : w.choices) choices.append(std::string(c));
    d["choices"] = choices;
    d["scope"] = w.scope == ld::SettingScope::kLoader ? "loader" : "command line";
    out.append(d);
  }
  return out;
}

// feedline.decode_image(): one JPEG as the loader decodes it (image_size, crop as run's flags).
// No image of more than max_pixels is made or decoded (the Python layer checks image_size
// against it; a file whose own size or crop's region is more fails here).
py::tuple decode_image(py::bytes data, unsigned image_size, const std::string& crop,
                       bool dct_scaling, std::uint64_t seed, std::uint32_t sample,
                       std::uint32_t epoch, std::uint64_t max_pixels) {
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
        sample, epoch, &pixels, max_pixels * 3);
  }();
  if (!info) {
    if (info.error().code() != fl::Errc::kResourceExhausted) raise_error(info.error());
    raise_error(fl::Error(info.error().code(),
                          fmt::format("{} (max_pixels={} bounds what decode_image makes and "
                                      "decodes: raise it for larger images)",
                                      info.error().message(), max_pixels)));
  }
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
  static py::exception<ModuleError> error(mod, "Error", PyExc_OSError);
  g_error = error.ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const PythonError& e) {
      PyErr_SetObject(e.type(), message_str(keyword_words(e.what())).ptr());
    }
  });

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
      .def(py::init<std::string, std::vector<std::pair<std::string, std::string>>,
                    std::optional<std::string>, std::uint32_t, py::object,
                    std::optional<std::string>, std::optional<std::string>, std::uint64_t,
                    std::string>(),
           py::arg("url"), py::arg("settings"), py::arg("state") = py::none(),
           py::arg("start_epoch") = 0, py::arg("transform") = py::none(),
           py::arg("html") = py::none(), py::arg("trace") = py::none(),
           py::arg("trace_events") = 1'000'000, py::arg("about") = "{}")
      .def("next", &PyLoader::next)
      .def("report_json", &PyLoader::report_json, py::arg("final") = false)
      .def("state_json", &PyLoader::state_json)
      .def_property_readonly("metrics_url", &PyLoader::metrics_url)
      .def("stop", &PyLoader::stop)
      .def("close", &PyLoader::close)
      .def_property_readonly("interrupted", &PyLoader::interrupted)
      .def_property_readonly("batches_per_epoch", &PyLoader::batches_per_epoch);

  mod.def("_settings", &settings_table);
  // The job's document from every rank's own (feedline/loader/job_report.hpp): the Python
  // package gathers them over torch.distributed's store and calls this on rank 0.
  mod.def(
      "_job_report_json",
      [](const std::vector<std::string>& ranks, unsigned hosts, double au_target, bool emulated) {
        fl::loader::JobSetup setup;
        setup.hosts = hosts;
        setup.au_target = au_target;
        setup.emulated = emulated;
        auto doc = fl::loader::job_report_json(ranks, setup);
        if (!doc) raise_error(doc.error());
        return *doc;
      },
      py::arg("ranks"), py::arg("hosts"), py::arg("au_target"), py::arg("emulated"));
  mod.def("_close_all", &close_all_loaders);
  mod.def("_decode_image", &decode_image, py::arg("data"), py::arg("image_size") = 0,
          py::arg("crop") = "", py::arg("dct_scaling") = true, py::arg("seed") = 0,
          py::arg("sample") = 0, py::arg("epoch") = 0, py::arg("max_pixels") = 89'478'485);
}
