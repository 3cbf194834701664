// The IoQueue of s3:// and http(s):// objects: ranged GETs through transports::HttpClient, large
// parts spread over helper event loops, nearby reads coalesced into one GET (the design notes are
// at HttpQueue in http_queue.cpp). Private to storage/src/http/.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "feedline/storage/backend.hpp"
#include "feedline/transports/http_client.hpp"

namespace feedline::storage::detail {

// The most one ReadOp may ask of an HTTP object (BackendCaps::max_request): larger reads are
// split into parts by the queue itself.
inline constexpr std::uint64_t kHttpMaxRequest = 1ull << 40;

// loops: at least one (the main client, driven by poll() when made with HttpClientOptions::driven),
// then the helper clients for large parts. part_size >= 4096. shared: the clients are a
// connection pool other queues use too (threaded clients only); the queue's requests carry a
// group of its own, and its cancel() ends those alone. answer_error: the error a read fails with
// when the server answers with another status than 200/206 (the backend's mapping, naming the
// object; the queue adds the offset).
using AnswerError =
    std::function<Error(const transports::HttpResponse& answer, std::string_view object)>;
std::unique_ptr<IoQueue> make_http_queue(unsigned depth,
                                         std::vector<std::shared_ptr<transports::HttpClient>> loops,
                                         std::uint64_t part_size, unsigned connections,
                                         bool coalesce, bool shared, AnswerError answer_error);

}  // namespace feedline::storage::detail
