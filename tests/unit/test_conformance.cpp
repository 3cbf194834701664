// The backend conformance suite: the same behaviour asked of every backend and configuration.
// Adding a backend means adding a row to kBackends: each row is its own test case
// ("conformance: <row>"), so a row this build or machine cannot run shows as Skipped in CTest
// without hiding the rows that ran. Decorators have rows of their own (a decorator over a backend):
// whatever they add, what a caller relies on must hold through them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <thread>

#include "feedline/storage/decorators.hpp"
#include "feedline/storage/registry.hpp"
#include "feedline/transports/http_client.hpp"
#include "test_support.hpp"

using namespace feedline;
using namespace feedline::storage;

namespace {

struct BackendCase {
  const char* name;
  const char* scheme;  // "file", "mem" or "nfs"
  transports::EngineKind engine;
  bool direct;
  std::string url = {};       // nfs: the directory to test in (FEEDLINE_TEST_NFS_URL)
  unsigned connections = 1;   // nfs: --connections
  bool caller_polls = false;  // HttpQueueOptions::caller_mostly_polls (the loop runs in poll())
  unsigned http_loops = 1;    // HttpConfig::loops
  std::uint64_t part_size = 256 * 1024;  // HTTP: several parts per large read
  const char* decorator = nullptr;       // "throttle", "faults", "counting": wraps the backend
};

using namespace std::chrono_literals;

// The decorator rows' settings: every effect that leaves what a caller relies on intact (a cap,
// drawn latencies, short reads read whole by a second request, latency spikes).
std::unique_ptr<Backend> decorate(const char* decorator, std::unique_ptr<Backend> b) {
  const std::string d = decorator;
  if (d == "throttle") {
    return make_throttle(std::move(b), {.bytes_per_second = 512.0 * (1 << 20),
                                        .latency = LatencyDistribution::lognormal(300us, 200us),
                                        .seed = 7});
  }
  if (d == "faults") {
    return make_faults(std::move(b),
                       {.seed = 7, .short_read_rate = 0.2, .spike_rate = 0.1, .spike_latency = 2ms})
        .value();
  }
  if (d == "counting") return make_counting(std::move(b), std::make_shared<CallCounts>());
  FAIL("unknown decorator " << d);
  return nullptr;
}

const BackendCase kBackends[] = {
    {"mem", "mem", transports::EngineKind::kAuto, false},
    {"file uring buffered", "file", transports::EngineKind::kUring, false},
    {"file uring direct", "file", transports::EngineKind::kUring, true},
    {"file posix buffered", "file", transports::EngineKind::kPosix, false},
    {"file posix direct", "file", transports::EngineKind::kPosix, true},
    // Network backends: run when tests/servers/conformance.sh provides servers (see its env).
    {"s3", "s3", transports::EngineKind::kAuto, false},
    {"http", "http", transports::EngineKind::kAuto, false},
    {"s3, loop in poll()", "s3", transports::EngineKind::kAuto, false, {}, 1, true},
    {"http, loop in poll()", "http", transports::EngineKind::kAuto, false, {}, 1, true},
    // Parts of 1 MiB and more spread over helper event loops (the object is 1 MiB + 12,345 B).
    {"s3, 3 event loops", "s3", transports::EngineKind::kAuto, false, {}, 1, false, 3, 1u << 20},
    {"http, 3 event loops, loop in poll()",
     "http",
     transports::EngineKind::kAuto,
     false,
     {},
     1,
     true,
     3,
     1u << 20},
    // Decorators over a backend (counting over O_DIRECT files: the inner queue's bounce copies
    // show in the decorator's stats).
    {"throttle(mem)",
     "mem",
     transports::EngineKind::kAuto,
     false,
     {},
     1,
     false,
     1,
     256 * 1024,
     "throttle"},
    {"faults(mem)",
     "mem",
     transports::EngineKind::kAuto,
     false,
     {},
     1,
     false,
     1,
     256 * 1024,
     "faults"},
    {"counting(mem)",
     "mem",
     transports::EngineKind::kAuto,
     false,
     {},
     1,
     false,
     1,
     256 * 1024,
     "counting"},
    {"counting(file uring direct)",
     "file",
     transports::EngineKind::kUring,
     true,
     {},
     1,
     false,
     1,
     256 * 1024,
     "counting"},
};

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// One backend under test, with a root to put keys under and a made-up object of odd size.
struct Fixture {
  std::unique_ptr<Backend> backend;
  std::string root;  // prefix for keys
  std::string key;   // the test object
  std::vector<std::byte> content;
  std::unique_ptr<ObjectHandle> handle;
  std::string skip;  // why this case cannot run here

  explicit Fixture(const BackendCase& c) {
    BackendConfig config;
    config.file.engine = c.engine;
    config.file.direct = c.direct;
    config.nfs.connections = c.connections;
    config.nfs.timeout = std::chrono::seconds(5);
    Registry registry;
    register_builtin_backends(registry);
    std::string url;
    const std::string scheme = c.scheme;
    if (scheme == "s3" || scheme == "http") {
      if (!transports::http_compiled_in()) {
        skip = "built without the HTTP backends (FEEDLINE_WITH_HTTP=OFF)";
        return;
      }
      url = env_or_empty(scheme == "s3" ? "FEEDLINE_TEST_S3_URL" : "FEEDLINE_TEST_HTTP_URL");
      if (url.empty()) {
        skip = "no server: run it under tests/servers/conformance.sh";
        return;
      }
      config.s3.endpoint = env_or_empty("FEEDLINE_TEST_S3_ENDPOINT");
      config.s3.access_key_id = env_or_empty("AWS_ACCESS_KEY_ID");
      config.s3.secret_access_key = env_or_empty("AWS_SECRET_ACCESS_KEY");
      config.http.part_size = c.part_size;
      config.http.loops = c.http_loops;
    } else if (scheme == "mem") {
      url = "mem://conformance/";
    } else if (!c.url.empty()) {
      url = c.url;
    } else {
      url = (testing::scratch_dir("conformance") / "").string();
    }
    auto r = registry.open(url, config);
    REQUIRE(r);
    backend = c.decorator ? decorate(c.decorator, std::move(r->backend)) : std::move(r->backend);
    root = r->key;
    key = root + "object.bin";
    content = testing::pattern_bytes((1 << 20) + 12345, 99);
    REQUIRE(backend->write(key, content));
    auto q = backend->make_queue({});
    if (!q && q.error().code() == Errc::kUnsupported) {
      skip = q.error().what();
      return;
    }
    REQUIRE(q);
    auto h = backend->open(key);
    REQUIRE(h);
    handle = std::move(*h);
  }
};

// Collects completions so a test can wait for specific ops.
struct Collector final : ReadCompletion {
  std::map<const ReadOp*, int> seen;
  void on_read_complete(ReadOp& op) noexcept override { ++seen[&op]; }
};

// Polls until done() or 20 s pass (a bound on hangs, not a speed check); with `completed`,
// through the collecting poll(), which appends what completed.
void run_until(IoQueue& q, const std::function<bool()>& done,
               std::vector<ReadOp*>* completed = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    if (completed) {
      q.poll(1, std::chrono::milliseconds(50), *completed);
    } else {
      q.poll(1, std::chrono::milliseconds(50));
    }
  }
  REQUIRE(done());
}

std::size_t times_in(const std::vector<ReadOp*>& v, const ReadOp& op) {
  return static_cast<std::size_t>(std::count(v.begin(), v.end(), &op));
}

// One read, waited for through the collecting poll() (no ReadCompletion): handed back once.
Result<std::uint64_t> read_one(IoQueue& q, const ObjectHandle& h, std::uint64_t off,
                               std::uint64_t len, MutableBytes dst) {
  ReadOp op;
  op.object = &h;
  op.offset = off;
  op.length = len;
  op.dst = dst;
  q.submit(op);
  std::vector<ReadOp*> done;
  run_until(
      q, [&] { return times_in(done, op) > 0; }, &done);
  q.poll(0, {}, done);
  CHECK(times_in(done, op) == 1);
  CHECK(q.in_flight() == 0);
  return op.result;
}

// n reads of len bytes each into consecutive slices of one buffer, at offset_of(i).
struct ManyOps {
  AlignedBuffer buffer;
  std::vector<ReadOp> ops;
  std::vector<ReadOp*> ptrs;
  ManyOps(const ObjectHandle& h, std::size_t n, std::size_t len,
          const std::function<std::uint64_t(std::size_t)>& offset_of, ReadCompletion& done)
      : buffer(AlignedBuffer::allocate(n * len).value()), ops(n) {
    for (std::size_t i = 0; i < n; ++i) {
      ops[i].object = &h;
      ops[i].offset = offset_of(i);
      ops[i].length = len;
      ops[i].dst = buffer.span().subspan(i * len, len);
      ops[i].done = &done;
      ptrs.push_back(&ops[i]);
    }
  }
};

}  // namespace

namespace {

void conformance(const BackendCase& bc) {
  Fixture f(bc);
  if (!f.skip.empty()) return testing::skip_test(f.skip);
  storage::QueueOptions qo;
  storage::HttpQueueOptions http;  // read by HTTP/S3 backends only
  http.caller_mostly_polls = bc.caller_polls;
  qo.http = &http;
  auto queue = f.backend->make_queue(qo).value();
  const std::uint64_t size = f.content.size();
  auto buf = AlignedBuffer::allocate(size + 8192).value();

  SECTION("stat reports the size") {
    auto info = f.backend->stat(f.key);
    REQUIRE(info);
    CHECK(info->size == size);
    CHECK(f.handle->size() == size);
  }
  SECTION("full read") {
    auto r = read_one(*queue, *f.handle, 0, size, buf.span());
    REQUIRE(r);
    CHECK(*r == size);
    CHECK(std::memcmp(buf.data(), f.content.data(), size) == 0);
    CHECK(queue->stats().ops == 1);
    CHECK(queue->stats().bytes == size);
    CHECK(queue->stats().lat.count() == 1);
  }
  SECTION("ranged read at an unaligned offset") {
    const std::uint64_t off = 3 * 4096 + 17, len = 10000;
    auto r = read_one(*queue, *f.handle, off, len, buf.span());
    REQUIRE(r);
    CHECK(*r == len);
    CHECK(std::memcmp(buf.data(), f.content.data() + off, len) == 0);
  }
  SECTION("read past EOF is a short read, not an error") {
    auto r = read_one(*queue, *f.handle, size - 100, 8192, buf.span());
    REQUIRE(r);
    CHECK(*r == 100);
    CHECK(std::memcmp(buf.data(), f.content.data() + size - 100, 100) == 0);
    auto beyond = read_one(*queue, *f.handle, size + 4096, 4096, buf.span());
    REQUIRE(beyond);
    CHECK(*beyond == 0);
    CHECK(queue->stats().short_reads == 2);
  }
  SECTION("missing object is a not-found error naming it") {
    auto h = f.backend->open(f.root + "no-such-object");
    REQUIRE_FALSE(h);
    CHECK(h.error().code() == Errc::kNotFound);
    CHECK(h.error().what().find("no-such-object") != std::string::npos);
    auto st = f.backend->stat(f.root + "no-such-object");
    REQUIRE_FALSE(st);
    CHECK(st.error().code() == Errc::kNotFound);
  }
  SECTION("unaligned destination buffer") {
    const MutableBytes dst = buf.span().subspan(1);
    auto r = read_one(*queue, *f.handle, 4096, 65536, dst);
    REQUIRE(r);
    CHECK(*r == 65536);
    CHECK(std::memcmp(dst.data(), f.content.data() + 4096, 65536) == 0);
    if (bc.direct) CHECK(queue->stats().bounced_ops == 1);
  }
  SECTION("a destination smaller than the read is an error, not an overflow") {
    auto r = read_one(*queue, *f.handle, 0, 8192, buf.span().first(4096));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(r.error().message().find("destination holds 4096 bytes, the read wants 8192") !=
          std::string::npos);
  }
  SECTION("reads refused at submit complete once, at the next poll, each with its error") {
    std::memset(buf.data(), 0x77, 4096);
    ReadOp no_object;
    no_object.length = 10;
    no_object.dst = buf.span().first(10);
    ReadOp too_long;  // over the request limit: refused before anything reads into dst
    too_long.object = f.handle.get();
    too_long.length = queue->max_request() + 1;
    too_long.dst = MutableBytes(buf.data(), static_cast<std::size_t>(too_long.length));
    ReadOp good;
    good.object = f.handle.get();
    good.offset = 4096;
    good.length = 100;
    good.dst = buf.span().subspan(8192, 100);
    Collector c;  // the refused ops run their completions too
    for (ReadOp* op : {&no_object, &too_long, &good}) op->done = &c;
    std::vector<ReadOp*> ops{&no_object, &too_long, &good};
    queue->submit(ops);
    CHECK(queue->in_flight() == 3);
    CHECK(c.seen.empty());  // submit() completes nothing itself
    std::vector<ReadOp*> done;
    run_until(
        *queue, [&] { return done.size() >= 3; }, &done);
    queue->poll(0, {}, done);
    CHECK(done.size() == 3);
    for (ReadOp* op : ops) {
      CHECK(times_in(done, *op) == 1);
      CHECK(c.seen[op] == 1);
    }
    REQUIRE_FALSE(no_object.result);
    CHECK(no_object.result.error().code() == Errc::kInvalidArgument);
    REQUIRE_FALSE(too_long.result);
    CHECK(too_long.result.error().code() == Errc::kInvalidArgument);
    CHECK(too_long.result.error().message().find("per-request limit") != std::string::npos);
    CHECK(std::all_of(buf.data(), buf.data() + 4096,
                      [](std::byte b) { return b == std::byte{0x77}; }));
    REQUIRE(good.result);
    CHECK(*good.result == 100);
    CHECK(std::memcmp(buf.data() + 8192, f.content.data() + 4096, 100) == 0);
    CHECK(queue->stats().errors == 2);
    CHECK(queue->in_flight() == 0);
  }
  SECTION("1,000 ops in flight") {
    constexpr std::size_t kOps = 1000, kLen = 4096;
    Collector c;
    ManyOps m(
        *f.handle, kOps, kLen, [](std::size_t i) { return (i * 7919 % 250) * kLen; },
        c);  // scattered
    auto& ops = m.ops;
    auto& big = m.buffer;
    auto& ptrs = m.ptrs;
    queue->submit(ptrs);
    CHECK(queue->in_flight() <= kOps);
    run_until(*queue, [&] { return c.seen.size() == kOps; });
    CHECK(queue->in_flight() == 0);
    for (std::size_t i = 0; i < kOps; ++i) {
      INFO("op " << i);
      REQUIRE(c.seen[&ops[i]] == 1);
      REQUIRE(ops[i].result);
      REQUIRE(*ops[i].result == kLen);
      REQUIRE(std::memcmp(big.data() + i * kLen, f.content.data() + ops[i].offset, kLen) == 0);
    }
    CHECK(queue->stats().ops == kOps);
    CHECK(queue->stats().mean_depth() > 0);
  }
  SECTION("cancel mid-run: every op completes exactly once, none is lost") {
    constexpr std::size_t kOps = 1000, kLen = 4096;
    Collector c;
    ManyOps m(
        *f.handle, kOps, kLen, [](std::size_t i) { return (i % 256) * kLen; }, c);
    auto& ops = m.ops;
    auto& big = m.buffer;
    auto& ptrs = m.ptrs;
    queue->submit(ptrs);
    queue->poll(0, {});
    queue->cancel();
    run_until(*queue, [&] { return queue->in_flight() == 0; });
    REQUIRE(c.seen.size() == kOps);
    std::size_t ok = 0, cancelled = 0;
    for (std::size_t i = 0; i < kOps; ++i) {
      REQUIRE(c.seen[&ops[i]] == 1);
      if (ops[i].result) {
        ++ok;
        REQUIRE(*ops[i].result == kLen);
        REQUIRE(std::memcmp(big.data() + i * kLen, f.content.data() + ops[i].offset, kLen) == 0);
      } else {
        REQUIRE(ops[i].result.error().code() == Errc::kCancelled);
        ++cancelled;
      }
    }
    CHECK(ok + cancelled == kOps);
  }
  SECTION("destroying a queue with ops in flight waits for them: nothing writes after") {
    // The object's first MiB: reads long enough that a destructor which did not wait would
    // leave some still landing after it returned (the direct rows catch that most runs).
    constexpr std::size_t kOps = 64, kLen = 16384;
    constexpr std::byte kPoison{0xEE}, kAfter{0x5A};
    std::memset(buf.data(), static_cast<int>(kPoison), kOps * kLen);
    auto q2 = f.backend->make_queue(qo).value();
    std::vector<ReadOp> ops(kOps);
    Collector c;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      ops[i].object = f.handle.get();
      ops[i].offset = i * kLen;
      ops[i].length = kLen;
      ops[i].dst = buf.span().subspan(i * kLen, kLen);
      ops[i].done = &c;
      q2->submit(ops[i]);
    }
    REQUIRE(q2->in_flight() == kOps);  // completions run in poll(), and nobody polled
    q2.reset();  // cancels and drains: the kernel or a helper thread writing into buf after
                 // this returns would be a use-after-free in a caller that frees buf next
    // What the ops left, then poison again at once (the sooner, the likelier a read the
    // destructor abandoned lands after it) and give such a read time to land: none may.
    const std::vector<std::byte> left(buf.data(), buf.data() + kOps * kLen);
    std::memset(buf.data(), static_cast<int>(kAfter), kOps * kLen);
    const std::map<const ReadOp*, int> seen = c.seen;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK(std::all_of(buf.data(), buf.data() + kOps * kLen,
                      [&](std::byte b) { return b == kAfter; }));
    CHECK(c.seen == seen);  // and no completion ran after the destructor returned
    // The destructor may or may not run completions, each at most once. A read that
    // completed holds the object's bytes; any other (cancelled, or never reported) left each
    // byte either the object's or the poison.
    for (std::size_t i = 0; i < kOps; ++i) {
      INFO("op " << i);
      const auto it = seen.find(&ops[i]);
      const int times = it == seen.end() ? 0 : it->second;
      REQUIRE(times <= 1);
      const std::byte* got = left.data() + i * kLen;
      const std::byte* want = f.content.data() + i * kLen;
      if (times == 1 && ops[i].result) {
        REQUIRE(*ops[i].result == kLen);
        REQUIRE(std::memcmp(got, want, kLen) == 0);
      } else {
        std::size_t foreign = 0;
        for (std::size_t k = 0; k < kLen; ++k) foreign += got[k] != want[k] && got[k] != kPoison;
        REQUIRE(foreign == 0);
      }
    }
  }
  SECTION("create, list and overwrite") {
    const auto a = testing::pattern_bytes(5000, 1);
    const auto b = testing::pattern_bytes(300, 2);
    REQUIRE(f.backend->write(f.root + "dir/a.bin", a));
    REQUIRE(f.backend->write(f.root + "dir/b.bin", b));
    auto listing = f.backend->list(f.root + "dir/");
    if (!listing && listing.error().code() == Errc::kUnsupported) {
      // Plain HTTP has no listing; the error must point at brace notation.
      CHECK(listing.error().hint().find("brace") != std::string::npos);
      CHECK(f.backend->stat(f.root + "dir/b.bin")->size == 300);
      return;
    }
    REQUIRE(listing);
    REQUIRE(listing->size() == 2);
    CHECK(listing->at(0).key.ends_with("a.bin"));
    CHECK(listing->at(0).size == 5000);
    CHECK(listing->at(1).size == 300);
    REQUIRE(f.backend->write(f.root + "dir/a.bin", b));
    CHECK(f.backend->stat(f.root + "dir/a.bin")->size == 300);
  }
  SECTION("an abandoned writer leaves no object") {
    {
      auto w = f.backend->create(f.root + "abandoned.bin");
      REQUIRE(w);
      REQUIRE((*w)->append(f.content));
    }
    CHECK(f.backend->stat(f.root + "abandoned.bin").error().code() == Errc::kNotFound);
  }
}

// Needs a real NFS server: ctest starts nfs-ganesha (tests/servers/ganesha.sh) and sets
// FEEDLINE_TEST_NFS_URL to a directory in its export; without it the case says it was skipped.
#if FEEDLINE_HAVE_NFS
constexpr bool kNfsBuilt = true;
#else
constexpr bool kNfsBuilt = false;
#endif

void conformance_nfs() {
  if (!kNfsBuilt)
    return testing::skip_test("built without the NFS backend (FEEDLINE_WITH_NFS=OFF)");
  const char* url = std::getenv("FEEDLINE_TEST_NFS_URL");
  if (url == nullptr || *url == '\0') {
    return testing::skip_test(
        "FEEDLINE_TEST_NFS_URL is not set (CTest's unit.conformance.nfs sets it and starts "
        "nfs-ganesha)");
  }
  for (unsigned connections : {1u, 3u}) {
    DYNAMIC_SECTION("nfs, " << connections << " connection(s)") {
      BackendCase bc{"nfs", "nfs", transports::EngineKind::kAuto, false, url, connections};
      conformance(bc);
    }
  }
}

// One test case per row: "conformance: mem", "conformance: file uring direct", ... The rows that
// need servers run in CTest's conformance.network (tests/servers/conformance.sh:
// "[conformance]~[nfs]") and unit.conformance.nfs ("conformance: nfs"), so where the build has
// those backends they are hidden ([.]) from the plain run, which would only skip them; where it has
// not, they show there as Skipped.
const bool kRowsRegistered = [] {
  for (const BackendCase& bc : kBackends) {
    const std::string scheme = bc.scheme;
    const bool network = scheme == "s3" || scheme == "http";
    std::string tags = "[storage][conformance]";
    if (network && transports::http_compiled_in()) tags += "[.]";
    testing::register_test(std::string("conformance: ") + bc.name, tags,
                           [&bc] { conformance(bc); });
  }
  const char* nfs_tags =
      kNfsBuilt ? "[storage][conformance][nfs][.]" : "[storage][conformance][nfs]";
  testing::register_test("conformance: nfs", nfs_tags, conformance_nfs);
  return true;
}();

}  // namespace

TEST_CASE("file backend: a directory is an error that says so", "[storage][file]") {
  Registry registry;
  register_builtin_backends(registry);
  const auto dir = testing::scratch_dir("dirs");
  auto r = registry.open(dir.string(), {});
  REQUIRE(r);
  auto h = r->backend->open(r->key);
  REQUIRE_FALSE(h);
  CHECK(h.error().code() == Errc::kIsDirectory);
  CHECK(h.error().what().find(dir.string()) != std::string::npos);
}
