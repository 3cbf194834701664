// Backend counters: what storage queues measure beyond the figures every queue has (ops, bytes,
// latencies), in QueueStats::counters and QueueStats::histograms, by name.
//
// Every such name is defined here once, with what it means, its kind and unit, and is written and
// read only through its definition: the queues that produce them (http_queue.cpp, nfs_backend.cpp,
// faults.cpp), the storage stage's live publication, the verdict, the Prometheus endpoint,
// diagnose and the reports. A misspelt name is a compile error, not a counter nobody writes. The
// docs list the same names (docs/backends/http.md, nfs.md; DESIGN.md for the decorators and
// CLI.md for the live ones); tests/unit/test_counters.cpp checks both ways, and
// tests/cli/http_nginx.sh that a real run reports each HTTP name.
//
// Kinds of names:
//  - exact names (family = false) are in a producing queue's stats from its start, 0 until
//    counted, so that a report shows "0 reconnects" rather than nothing and a Prometheus series
//    exists from the first scrape;
//  - a family (family = true) is a prefix and a member per value of something ("http_retry_" +
//    a reason, "http_status_" + a status); a member appears with its first count;
//  - live names (live = true) are in no QueueStats: the storage stage adds them to what it
//    publishes for live readers (live_counters()).
// Names a backend of an embedder's own makes up are allowed (QueueStats::counters is a map):
// readers treat a name they find no definition for as a plain total.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace feedline::storage {

struct QueueStats;

enum class CounterKind : std::uint8_t {
  kTotal,      // counts up; QueueStats::merge() adds queues' values
  kPeak,       // a high-water mark (merge() adds these too: an upper bound over queues)
  kHistogram,  // in QueueStats::histograms: one value per event
};

enum class CounterUnit : std::uint8_t { kEvents, kBytes, kNanoseconds };

// What readers treat specially. Prometheus serves kRetry counters as
// feedline_storage_retries_total{reason}, kReconnect ones as feedline_storage_reconnects_total,
// kPlain totals as feedline_storage_events_total{event}, and no kRetryTotal (the sum of a
// backend's kRetry counters: served already), peak or histogram; the run's trace marks each
// kRetry and kReconnect count as an instant.
enum class CounterRole : std::uint8_t { kPlain, kRetry, kRetryTotal, kReconnect };

struct CounterDef {
  std::string_view name;  // the exact name, or a family's prefix ("http_retry_")
  // Who produces it: "http" (http(s):// and s3:// queues), "nfs", "faults" (the decorator),
  // "storage stage" (live names).
  std::string_view producer;
  CounterKind kind = CounterKind::kTotal;
  CounterUnit unit = CounterUnit::kEvents;
  CounterRole role = CounterRole::kPlain;
  bool family = false;
  bool live = false;
  // kRetry of an exact name: its reason (Prometheus's label); a kRetry family's reason is the
  // member.
  std::string_view retry_reason = {};
  std::string_view help = {};  // one sentence: what it counts
};

namespace counters {

using enum CounterKind;
using enum CounterUnit;
using enum CounterRole;

// HTTP and S3 (storage/src/http/http_queue.cpp). docs/backends/http.md.
inline constexpr CounterDef kHttpRequests{
    .name = "http_requests",
    .producer = "http",
    .help = "GET requests the queue made for its reads (a request's retries count once)"};
inline constexpr CounterDef kHttpFailedRequests{
    .name = "http_failed_requests",
    .producer = "http",
    .help = "requests that failed for good, retries spent (cancelled ones not counted)"};
inline constexpr CounterDef kHttpStatus{
    .name = "http_status_",
    .producer = "http",
    .family = true,
    .help =
        "requests by the HTTP status of their last answer: http_status_206, "
        "http_status_404, ... (each retried answer is in http_retry_<reason>)"};
inline constexpr CounterDef kHttpCoalescedReads{
    .name = "http_coalesced_reads",
    .producer = "http",
    .help = "reads that shared a GET with others (nearby reads coalesced into one request)"};
inline constexpr CounterDef kHttpUnknownSizeRestReads{
    .name = "http_unknown_size_rest_reads",
    .producer = "http",
    .help =
        "objects of unknown size larger than their first GET asked for, read on with one "
        "more GET for the rest"};
inline constexpr CounterDef kHttpConnectionsOpened{
    .name = "http_connections_opened",
    .producer = "http",
    .help = "connections the requests opened (TCP, and TLS where https)"};
inline constexpr CounterDef kHttpConnectionsPeak{
    .name = "http_connections_peak",
    .producer = "http",
    .kind = kPeak,
    .help = "the most connections open at once (queues sharing one pool: the pool's)"};
inline constexpr CounterDef kHttpRetries{.name = "http_retries",
                                         .producer = "http",
                                         .role = kRetryTotal,
                                         .help = "attempts retried, for every reason"};
inline constexpr CounterDef kHttpRetry{
    .name = "http_retry_",
    .producer = "http",
    .role = kRetry,
    .family = true,
    .help =
        "attempts retried, by reason: http_retry_http_503, http_retry_reset, "
        "http_retry_timeout, http_retry_connect, http_retry_truncated, ..."};
inline constexpr CounterDef kHttpThrottled{
    .name = "http_throttled",
    .producer = "http",
    .help = "attempts retried after a 429 or 503 answer (the server throttling)"};
inline constexpr CounterDef kTtfb{.name = "ttfb_ns",
                                  .producer = "http",
                                  .kind = kHistogram,
                                  .unit = kNanoseconds,
                                  .help = "time to first byte per request (its last attempt)"};
inline constexpr CounterDef kTransfer{
    .name = "transfer_ns",
    .producer = "http",
    .kind = kHistogram,
    .unit = kNanoseconds,
    .help = "transfer time per request after its first byte (its last attempt)"};

// NFS (storage/src/nfs/nfs_backend.cpp). docs/backends/nfs.md.
inline constexpr CounterDef kCopiedBytes{
    .name = "copied_bytes",
    .producer = "nfs",
    .unit = kBytes,
    .help = "bytes copied from libnfs's buffers into the reads' (one copy per byte read)"};
inline constexpr CounterDef kReconnects{
    .name = "reconnects",
    .producer = "nfs",
    .role = kReconnect,
    .help = "connections re-established after the server went away"};
inline constexpr CounterDef kNfsRetries{
    .name = "nfs_retries",
    .producer = "nfs",
    .role = kRetry,
    .retry_reason = "nfs",
    .help = "read RPCs sent again (a timeout, a reconnect, a server's state error)"};
inline constexpr CounterDef kRtt{.name = "rtt_ns",
                                 .producer = "nfs",
                                 .kind = kHistogram,
                                 .unit = kNanoseconds,
                                 .help = "round trip per read RPC"};

// The faults decorator (storage/src/faults/faults.cpp). docs/DESIGN.md.
inline constexpr CounterDef kFaultsErrors{.name = "faults_errors",
                                          .producer = "faults",
                                          .help = "reads failed with an injected I/O error"};
inline constexpr CounterDef kFaultsResets{.name = "faults_resets",
                                          .producer = "faults",
                                          .help = "reads failed with an injected connection reset"};
inline constexpr CounterDef kFaultsShortReads{
    .name = "faults_short_reads",
    .producer = "faults",
    .help = "reads cut short on purpose, the rest read by a second request"};
inline constexpr CounterDef kFaultsSpikes{.name = "faults_spikes",
                                          .producer = "faults",
                                          .help = "reads held back by an injected latency spike"};

// Live only (live_counters(), published by the storage stage). docs/CLI.md (Prometheus).
inline constexpr CounterDef kIoRetries{
    .name = "io_retries",
    .producer = "storage stage",
    .role = kRetry,
    .live = true,
    .retry_reason = "io",
    .help =
        "reads the queue retried (QueueStats::retries: EAGAIN, short-read continuations) "
        "where its backend counts no retries by reason of its own"};

inline constexpr std::array kAll = {&kHttpRequests,
                                    &kHttpFailedRequests,
                                    &kHttpStatus,
                                    &kHttpCoalescedReads,
                                    &kHttpUnknownSizeRestReads,
                                    &kHttpConnectionsOpened,
                                    &kHttpConnectionsPeak,
                                    &kHttpRetries,
                                    &kHttpRetry,
                                    &kHttpThrottled,
                                    &kTtfb,
                                    &kTransfer,
                                    &kCopiedBytes,
                                    &kReconnects,
                                    &kNfsRetries,
                                    &kRtt,
                                    &kFaultsErrors,
                                    &kFaultsResets,
                                    &kFaultsShortReads,
                                    &kFaultsSpikes,
                                    &kIoRetries};

}  // namespace counters

// The definition of a name in QueueStats::counters or ::histograms (or of a live name): its own,
// or its family's (the longest prefix that matches, with something after it); null for a name
// no definition knows.
const CounterDef* find_counter(std::string_view name) noexcept;

// The reason a retry counter counts ("http_retry_http_503" -> "http_503", "nfs_retries" ->
// "nfs"); nullopt for a name that is no kRetry counter.
std::optional<std::string> retry_reason(std::string_view name);

// The name of a family's member ("http_status_" + "206").
std::string member_name(const CounterDef& family, std::string_view member);

// "name value" as the text reports show a counter: bytes (CounterUnit::kBytes) as "12.0 MiB",
// the others as the number.
std::string counter_text(std::string_view name, std::uint64_t value);

// A queue's counters as the storage stage publishes them for live readers (metrics, the trace):
// QueueStats::counters, and io_retries (QueueStats::retries) where the backend counts no retries
// by reason of its own (else each retry would count twice, under its reason and under "io").
std::map<std::string, std::uint64_t, std::less<>> live_counters(const QueueStats& stats);

}  // namespace feedline::storage
