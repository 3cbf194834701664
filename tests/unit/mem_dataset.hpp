// A files-format dataset in memory (mem://) for the pipeline's unit tests, with the digest of
// what was written computed independently of the pipeline.
#pragma once

#include <fmt/format.h>
#include <xxhash.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "feedline/loader/dataset.hpp"
#include "feedline/storage/registry.hpp"
#include "test_support.hpp"

namespace feedline::testing {

// A files-format dataset in memory: n samples of `size` bytes (size varies a little per sample).
struct MemDataset {
  std::unique_ptr<feedline::storage::Backend> backend;
  loader::Dataset dataset;
  std::map<std::string, std::uint64_t> digest_by_key;  // independent: XXH3 of what we wrote
  std::uint64_t digest_sum = 0;

  MemDataset(std::size_t n, std::size_t size,
             std::unique_ptr<feedline::storage::Backend> b = nullptr) {
    feedline::storage::Registry registry;
    feedline::storage::register_builtin_backends(registry);
    backend = b ? std::move(b) : std::move(registry.open("mem://ds/", {})->backend);
    for (std::size_t i = 0; i < n; ++i) {
      const std::string key = fmt::format("ds/{:06}.bin", i);
      const auto bytes = pattern_bytes(size + (i % 7) * 100, i + 1);
      REQUIRE(backend->write(key, bytes));
      const std::uint64_t h = XXH3_64bits(bytes.data(), bytes.size());
      digest_by_key[fmt::format("{:06}", i)] = h;
      digest_sum += h;
    }
    loader::DatasetOptions o;
    o.format = loader::DatasetFormat::kFiles;
    auto d = loader::open_dataset(*backend, "ds/", o);
    REQUIRE(d);
    dataset = std::move(*d);
    REQUIRE(dataset.samples.size() == n);
  }
};

}  // namespace feedline::testing
