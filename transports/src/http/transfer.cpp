// One HTTP request's set-up and body sink (see detail/transfer.hpp).
//
// The body of a ranged GET is written by on_write straight into the caller's buffer (or its
// scatter segments) at the right offset: no intermediate copy. A status outside 200/206 keeps
// the first 64 KiB of its body for the error. Several options below are there for a measured
// reason, said next to them: the receive buffer's size, not keeping headers of reads, ACKing at
// once near the end of a body.
#include "detail/transfer.hpp"

#include <fmt/format.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

#include "feedline/core/redact.hpp"

namespace feedline::transports::detail {
namespace {

constexpr std::size_t kErrorBodyLimit = 64 * 1024;

// Body bytes still to come below which every read is ACKed at once (see on_write).
constexpr std::uint64_t kAckTail = 256 * 1024;

// A header line "Name: value" whose name is `name` (lower case, with the colon): its value.
std::optional<std::string_view> value_of(std::string_view line, std::string_view name) {
  if (line.size() <= name.size() || strncasecmp(line.data(), name.data(), name.size()) != 0)
    return std::nullopt;
  return line.substr(name.size());
}

// The end of a ranged GET's answer headers: a read of unknown size (HttpRequest::size_unknown)
// learns the object's size (a 200's Content-Length, a 206's or a 416's Content-Range total:
// "bytes 0-99/1234", "bytes */0"; a total of "*" says nothing); a 200 or 206 is checked against
// what was asked (check_ranged_answer). False: refused (t.refused says why).
bool end_of_ranged_headers(Transfer& t) {
  const AnswerHeaders& a = t.answer;
  if (t.req.size_unknown) {
    if (a.status == 200) {
      t.resp.object_size = a.length;
    } else if ((a.status == 206 || a.status == 416) && a.range) {
      t.resp.object_size = a.range->total;
    }
  }
  if (a.status != 200 && a.status != 206) return true;
  t.refused = check_ranged_answer(a, t.asked());
  return !t.refused;
}

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* ud) {
  auto* t = static_cast<Transfer*>(ud);
  std::string_view line(data, size * n);
  if (line.starts_with("HTTP/")) {  // a new response (after 100 Continue or a redirect)
    t->resp.headers.clear();
    t->resp.object_size.reset();
    const auto sp = line.find(' ');
    if (sp != std::string_view::npos)
      t->status = std::strtol(std::string(line.substr(sp + 1, 3)).c_str(), nullptr, 10);
    t->answer = AnswerHeaders{};
    t->answer.status = t->status;
    return size * n;
  }
  if (t->ranged()) {
    if (line == "\r\n" || line == "\n") return end_of_ranged_headers(*t) ? size * n : 0;
    if (const auto range = value_of(line, "content-range:")) {
      t->answer.has_range = true;
      t->answer.range = parse_content_range(*range);
    } else if (const auto length = value_of(line, "content-length:")) {
      t->answer.has_length = true;
      t->answer.length = parse_content_length(*length);
    }
  }
  // A ranged read's successful answer: nobody reads its headers, and keeping them (a map node
  // and strings each) was ~3% of the CPU of 10,000 small GETs.
  if (t->ranged() && (t->status == 200 || t->status == 206)) return size * n;
  const auto colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  std::string name(line.substr(0, colon));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' '))
    value.remove_suffix(1);
  t->resp.headers[std::move(name)] = std::string(value);
  return size * n;
}

std::size_t on_write(char* data, std::size_t size, std::size_t n, void* ud) {
  auto* t = static_cast<Transfer*>(ud);
  const std::size_t len = size * n;
  const bool ok = t->status == 200 || t->status == 206;
  if (t->ranged() && ok) {
    // 200 to a ranged request: the server ignored Range. Fine only when we asked for the
    // object from its first byte (the body is then the object, cut at our length).
    if (t->status == 200 && *t->req.range_offset + t->received != 0 && t->attempt_bytes == 0) {
      t->range_ignored = true;
      return 0;
    }
    if (t->req.grow_dst && t->received + len > t->req.dst.size() && !t->make_room(len)) {
      t->filled = true;  // refused: the request ends with what dst holds (the caller knows why)
      return 0;
    }
    const std::uint64_t room = t->req.range_length - t->received;
    if (len > room) {
      if (t->status == 200 && t->req.size_unknown) {
        // The server ignored Range and the object is larger than the guess: keep what fits,
        // refuse the rest (never past dst); its Content-Length says how much more there is.
        const auto fits = static_cast<std::size_t>(room);
        if (fits) t->store(data, fits);
        t->received += fits;
        t->resp.bytes += fits;
        t->attempt_bytes += fits;
        t->filled = true;
        return 0;
      }
      if (t->status == 200 && t->req.whole) {
        t->overflow = true;  // the object grew since it was listed
      } else if (t->status == 200) {
        t->range_ignored = true;
      } else {
        t->overflow = true;
      }
      return 0;
    }
    t->store(data, len);
    t->received += len;
    t->resp.bytes += len;
    t->attempt_bytes += len;
    // curl has just read the socket dry: near the end of the body, ACK now (see ack_at_once).
    // A delayed ACK here cost the GET 40 ms, and the in-order read-ahead window behind it
    // waited as long. Earlier in a large body the stream of segments brings ACKs anyway, and
    // one forced per read there cost ~0.1 CPU-s per GiB in extra ACKs.
    if (t->fd != CURL_SOCKET_BAD && t->req.range_length - t->received <= kAckTail)
      ack_at_once(t->fd);
    return len;
  }
  const std::size_t limit = ok ? t->req.max_body : kErrorBodyLimit;
  if (t->resp.body.size() + len > limit) {
    if (ok) {
      t->overflow = true;
      return 0;
    }
    t->resp.body.append(data, limit - t->resp.body.size());
    return len;
  }
  t->resp.body.append(data, len);
  if (ok) t->resp.bytes += len;
  return len;
}

std::size_t on_read(char* buf, std::size_t size, std::size_t n, void* ud) {
  auto* t = static_cast<Transfer*>(ud);
  const std::size_t left = t->req.upload.size() - t->upload_pos;
  const std::size_t k = std::min(left, size * n);
  std::memcpy(buf, t->req.upload.data() + t->upload_pos, k);
  t->upload_pos += k;
  return k;
}

// Uploads skip curl's "Expect: 100-continue" round trip by removing the header ("Expect:") —
// except when signing: curl 7.88 then lists "expect" in SignedHeaders although it sends no such
// header, and every verifier rejects the signature (shown in tests/unit/test_http.cpp). Signed
// uploads keep curl's default (100-continue above 1 MiB).
void no_expect(Transfer& t, const TransferSetup& setup) {
  if (!setup.options.sigv4) append(t.headers, "Expect:");
}

Result<void> check_range(const HttpRequest& r) {
  if (r.range_length == 0) return fail(Errc::kInvalidArgument, "a ranged GET of 0 bytes");
  std::uint64_t end = 0;
  for (const auto& seg : r.scatter) {
    if (seg.at < end || seg.at + seg.dst.size() > r.range_length) {
      return fail(Errc::kInvalidArgument, "scatter segments out of order or outside the range");
    }
    end = seg.at + seg.dst.size();
  }
  if (r.whole && *r.range_offset != 0)
    return fail(Errc::kInvalidArgument, "a whole-object GET from offset > 0");
  return {};
}

}  // namespace

void append(Slist& list, const char* line) {
  if (curl_slist* head = curl_slist_append(list.get(), line)) {
    (void)list.release();  // the same head when the list had one
    list.reset(head);
  }
}

EasyHandle EasyPool::acquire() {
  if (free_.empty()) return EasyHandle(curl_easy_init());
  EasyHandle easy = std::move(free_.back());
  free_.pop_back();
  return easy;
}

void EasyPool::release(EasyHandle easy) {
  if (easy && free_.size() < kMaxKept) free_.push_back(std::move(easy));
}

TransferSetup::TransferSetup(const HttpClientOptions& o) : options(o) {
  for (const auto& r : o.connect_to) append(connect_to, r.c_str());
  if (o.sigv4) sigv4_param = fmt::format("aws:amz:{}:{}", o.sigv4->region, o.sigv4->service);
}

std::string Transfer::shown() const { return req.shown.empty() ? redact_url(req.url) : req.shown; }

void Transfer::begin_attempt() {
  status = 0;
  fd = CURL_SOCKET_BAD;
  range_ignored = false;
  overflow = false;
  filled = false;
  attempt_bytes = 0;
  errbuf[0] = '\0';
  resp.headers.clear();
  resp.object_size.reset();
  resp.redirect_url.clear();
  answer = AnswerHeaders{};
  refused.reset();
  if (!ranged()) resp.body.clear();
  upload_pos = 0;
}

bool Transfer::make_room(std::size_t len) {
  const std::uint64_t want = std::min<std::uint64_t>(received + len, req.range_length);
  if (want <= req.dst.size()) return true;  // past the range: on_write's own checks refuse it
  const std::uint64_t need = std::max(resp.object_size.value_or(req.range_length), want);
  auto grow = std::exchange(req.grow_dst, nullptr);  // once per request
  const MutableBytes bigger = grow(need, received);
  if (bigger.size() < need) return false;
  req.dst = bigger;
  return true;
}

void Transfer::store(const char* data, std::size_t len) {
  if (req.scatter.empty()) {
    std::memcpy(req.dst.data() + received, data, len);
    return;
  }
  std::uint64_t pos = received;
  while (len > 0 && segment < req.scatter.size()) {
    const HttpRequest::Segment& s = req.scatter[segment];
    const std::uint64_t end = s.at + s.dst.size();
    if (pos >= end) {
      ++segment;
      continue;
    }
    // Bytes before the segment are a gap (dropped); then as many as fit in it.
    const std::uint64_t n = pos < s.at ? std::min<std::uint64_t>(len, s.at - pos)
                                       : std::min<std::uint64_t>(len, end - pos);
    if (pos >= s.at) std::memcpy(s.dst.data() + (pos - s.at), data, n);
    pos += n;
    data += n;
    len -= static_cast<std::size_t>(n);
  }
}

Result<void> configure(Transfer& t, const TransferSetup& setup) {
  CURL* e = t.easy.get();
  const HttpRequest& r = t.req;
  const HttpClientOptions& o = setup.options;
  curl_easy_reset(e);
  curl_easy_setopt(e, CURLOPT_URL, r.url.c_str());
  curl_easy_setopt(e, CURLOPT_PRIVATE, &t);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t.errbuf);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  // The path as written: curl would otherwise remove "." and ".." segments, and an S3 key
  // "prefix/../../x" from a listing would become a (signed) request for "/x", outside the bucket.
  curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  // A receive buffer that holds the whole answer (headers included) up to 512 KiB: one recv()
  // per small object instead of one per 16 KiB (curl's default), and each of those recv()s
  // came with a poll(): 5 recv + 6 poll per 64 KiB GET before, 1 + 2 now, as curl's own tool
  // (which asks for 100 KiB).
  if (r.range_offset) {
    const std::uint64_t want =
        std::clamp<std::uint64_t>(r.range_length + 16 * 1024, 16 * 1024, 512 * 1024);
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, static_cast<long>(want));
  }
  curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, setup.sockets.open);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, setup.sockets.data);
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, setup.sockets.close);
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, setup.sockets.data);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &on_write);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.connect_timeout.count()));
  // A stalled transfer: less than 1 byte/s for stall_timeout fails the attempt.
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME,
                   std::max<long>(1, static_cast<long>(o.stall_timeout.count() / 1000)));
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, o.insecure ? 0L : 1L);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, o.insecure ? 0L : 2L);
  if (!o.ca_bundle.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, o.ca_bundle.c_str());
  if (setup.connect_to) curl_easy_setopt(e, CURLOPT_CONNECT_TO, setup.connect_to.get());

  t.headers.reset();
  bool has_sha = false;
  for (const auto& h : r.headers) {
    append(t.headers, h.c_str());
    if (h.size() > 21 && strncasecmp(h.c_str(), "x-amz-content-sha256:", 21) == 0) has_sha = true;
  }
  if (r.range_offset) {
    FEEDLINE_TRY(check_range(r));
    if (const auto range = attempt_range(*r.range_offset, r.range_length, t.received, r.whole)) {
      append(t.headers, fmt::format("Range: bytes={}-{}", range->first, range->last).c_str());
    }
  }
  if (r.method == "HEAD") {
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  } else if (r.method == "PUT") {
    curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(e, CURLOPT_READFUNCTION, &on_read);
    curl_easy_setopt(e, CURLOPT_READDATA, &t);
    curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.upload.size()));
    no_expect(t, setup);
  } else if (r.method == "POST") {
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, reinterpret_cast<const char*>(r.upload.data()));
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.upload.size()));
    no_expect(t, setup);
  } else if (r.method != "GET") {
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  }
  if (o.sigv4) {
    const SigV4& s = *o.sigv4;
    // S3 wants the payload hash in a header; it is signed with the rest. Bodies we send are
    // either empty (GET/HEAD/DELETE) or hashed by the caller.
    if (!has_sha)
      append(
          t.headers,
          "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    if (!s.session_token.empty())
      append(t.headers, ("x-amz-security-token: " + s.session_token).c_str());
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, setup.sigv4_param.c_str());
    curl_easy_setopt(e, CURLOPT_USERNAME, s.access_key_id.c_str());
    curl_easy_setopt(e, CURLOPT_PASSWORD, s.secret_access_key.c_str());
  } else if (o.basic_auth) {
    // Sent with the first request (no 401 round trip first), as curl -u does.
    curl_easy_setopt(e, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC));
    curl_easy_setopt(e, CURLOPT_USERNAME, o.basic_auth->user.c_str());
    curl_easy_setopt(e, CURLOPT_PASSWORD, o.basic_auth->password.c_str());
  }
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, t.headers.get());
  return {};
}

// ACK what arrives at once. Linux delays ACKs on request/response connections (up to 40 ms),
// and a server that sends the tail of a response only once the rest is ACKed (Nagle: nginx
// with tcp_nopush, on a response one segment past a full one) then stalls: 1 in 200 small GETs
// took 40 ms longer, which halved objects/s at 16 in flight. TCP_QUICKACK does not stick, and
// it sends a pending ACK only once the receive queue is empty, so it is set each time curl
// waits for an answer (CurlReactor::on_socket) and after every body write near the end of a
// body (on_write), when curl has just read the socket dry (one setsockopt each). Once per read
// wake-up, before curl read, was not enough: curl also reads in calls that no wake-up of this
// socket started (kernel counter TcpExtDelayedACKs: 25-43 per 10,000 64 KiB GETs before, 0 after).
void ack_at_once(curl_socket_t fd) noexcept {
#ifdef TCP_QUICKACK
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
#else
  (void)fd;
#endif
}

}  // namespace feedline::transports::detail
