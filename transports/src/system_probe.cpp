#include "feedline/transports/system_probe.hpp"

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/utsname.h>

#include <chrono>
#include <cstring>

#include "feedline/core/bytes.hpp"

#if FEEDLINE_HAVE_URING
#include <liburing.h>
#endif
#if FEEDLINE_HAVE_CURL
#include <curl/curl.h>
#endif

namespace feedline::transports {

UringProbe probe_uring() {
  UringProbe p;
  utsname u{};
  if (::uname(&u) == 0) p.kernel = u.release;
#if FEEDLINE_HAVE_URING
  p.compiled_in = true;
  io_uring ring{};
  io_uring_params params{};
  const int rc = io_uring_queue_init_params(8, &ring, &params);
  if (rc < 0) {
    p.reason = fmt::format("io_uring_setup refused: {}", std::strerror(-rc));
    return p;
  }
  p.available = true;
  const struct {
    unsigned bit;
    const char* name;
  } feats[] = {{IORING_FEAT_SINGLE_MMAP, "single-mmap"},
               {IORING_FEAT_NODROP, "nodrop"},
               {IORING_FEAT_SUBMIT_STABLE, "submit-stable"},
               {IORING_FEAT_RW_CUR_POS, "rw-cur-pos"},
               {IORING_FEAT_FAST_POLL, "fast-poll"},
               {IORING_FEAT_SQPOLL_NONFIXED, "sqpoll-nonfixed"},
               {IORING_FEAT_EXT_ARG, "ext-arg"},
               {IORING_FEAT_NATIVE_WORKERS, "native-workers"},
               {IORING_FEAT_RSRC_TAGS, "rsrc-tags"}};
  for (const auto& f : feats) {
    if (params.features & f.bit) p.features.push_back(f.name);
  }
  if (io_uring_probe* probe = io_uring_get_probe_ring(&ring)) {
    p.read_fixed = io_uring_opcode_supported(probe, IORING_OP_READ_FIXED);
    io_uring_free_probe(probe);
  }
  io_uring_queue_exit(&ring);
  const struct {
    unsigned flags;
    const char* name;
  } modes[] = {
      {IORING_SETUP_SQPOLL, "sqpoll"},
      {IORING_SETUP_COOP_TASKRUN, "coop-taskrun"},
      {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN, "single-issuer+defer-taskrun"},
      {IORING_SETUP_IOPOLL, "iopoll"}};
  for (const auto& m : modes) {
    io_uring r{};
    io_uring_params pp{};
    pp.flags = m.flags;
    if (io_uring_queue_init_params(4, &r, &pp) == 0) {
      p.setup.push_back(m.name);
      io_uring_queue_exit(&r);
    }
  }
#else
  p.reason = "built without io_uring (liburing)";
#endif
  return p;
}

MemlockLimit memlock_limit() {
  MemlockLimit m;
  rlimit r{};
  if (::getrlimit(RLIMIT_MEMLOCK, &r) != 0) return m;
  m.unlimited = r.rlim_cur == RLIM_INFINITY;
  m.soft = r.rlim_cur == RLIM_INFINITY ? 0 : r.rlim_cur;
  m.hard = r.rlim_max == RLIM_INFINITY ? 0 : r.rlim_max;
  return m;
}

std::string libcurl_version() {
#if FEEDLINE_HAVE_CURL
  const curl_version_info_data* v = curl_version_info(CURLVERSION_NOW);
  return v && v->version ? std::string(v->version) : std::string("?");
#else
  return {};
#endif
}

std::string libnfs_version() {
#ifdef FEEDLINE_LIBNFS_VERSION
  return FEEDLINE_LIBNFS_VERSION;
#else
  return {};
#endif
}

double memcpy_bandwidth(std::uint64_t bytes, int reps) {
  auto a = AlignedBuffer::allocate(bytes);
  auto b = AlignedBuffer::allocate(bytes);
  if (!a || !b) return 0;
  std::memset(a->data(), 1, bytes);
  std::memset(b->data(), 0, bytes);  // fault the pages in before timing
  double best = 0;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b->data(), a->data(), bytes);
    const std::chrono::duration<double> s = std::chrono::steady_clock::now() - t0;
    if (s.count() > 0) best = std::max(best, static_cast<double>(bytes) / s.count());
  }
  return best;
}

}  // namespace feedline::transports
