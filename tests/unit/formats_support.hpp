// Helpers for the dataset-format tests: whole-object reads through a backend, shell commands,
// and an independent digest of a dataset (its own walk over objects and tar members, sharing
// nothing with the generator but the tar reader and the zstd codec that other tests check).
#pragma once

#include <sys/wait.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/loader/codec.hpp"
#include "feedline/loader/tar.hpp"
#include "feedline/storage/backend.hpp"
#include "feedline/storage/registry.hpp"
#include "test_support.hpp"

namespace feedline::testing {

inline std::vector<std::byte> read_object(storage::Backend& backend, const std::string& key) {
  auto handle = backend.open(key);
  if (!handle) throw std::runtime_error(handle.error().what());
  auto queue = backend.make_queue({}).value();
  std::vector<std::byte> out((*handle)->size());
  struct Done final : storage::ReadCompletion {
    bool done = false;
    void on_read_complete(storage::ReadOp&) noexcept override { done = true; }
  } done;
  storage::ReadOp op;
  op.object = handle->get();
  op.length = out.size();
  op.dst = out;
  op.done = &done;
  if (!out.empty()) {
    queue->submit(op);
    while (!done.done) queue->poll(1, std::chrono::milliseconds(10));
    if (!op.result) throw std::runtime_error(op.result.error().what());
    if (*op.result != out.size()) throw std::runtime_error("short read of " + key);
  }
  return out;
}

// Runs a shell command; returns its exit status and fills `out` with stdout+stderr.
inline int run_command(const std::string& cmd, std::string* out = nullptr) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  std::string text;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int status = ::pclose(p);
  if (out) *out = std::move(text);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline std::uint64_t xxh3(ConstBytes b) { return XXH3_64bits(b.data(), b.size()); }

// Decoded bytes of one member or file (decompressed when the name ends in ".zst").
inline std::vector<std::byte> decode(std::string_view name, ConstBytes stored) {
  if (!name.ends_with(".zst")) return {stored.begin(), stored.end()};
  const std::uint64_t n = loader::Decompressor::content_size(stored).value();
  std::vector<std::byte> out(n);
  loader::Decompressor d;
  if (d.decompress(stored, out).value() != n) throw std::runtime_error("bad decode");
  return out;
}

// The exactly-once digest of everything under root: the sum of XXH3-64 over the decoded bytes
// of every file (skipping *.idx and hidden files such as gen's manifest), or of every regular tar
// member.
inline std::uint64_t independent_digest(storage::Backend& backend, const std::string& root,
                                        bool tar) {
  std::uint64_t sum = 0;
  const auto objects = backend.list(root).value();
  for (const auto& o : objects) {
    if (o.key.ends_with(".idx") || o.key.substr(o.key.rfind('/') + 1).starts_with('.')) continue;
    const auto bytes = read_object(backend, o.key);
    if (!tar) {
      sum += xxh3(decode(o.key, bytes));
      continue;
    }
    const auto entries = loader::tar::list_entries(bytes, o.key).value();
    for (const auto& e : entries) {
      if (!e.regular()) continue;
      sum += xxh3(decode(e.name, ConstBytes(bytes).subspan(e.data_offset, e.size)));
    }
  }
  return sum;
}

// A fresh, empty location in a backend to generate a dataset into.
struct Store {
  std::unique_ptr<storage::Backend> backend;
  std::string root;
  std::filesystem::path dir;  // file stores: the directory
};

// kind: "mem", "file" or "file-direct" (O_DIRECT: 4 KiB-aligned scans); `area` keeps one test
// file's stores apart from another's (ctest runs cases in parallel processes).
inline Store make_store(const std::string& kind, const std::string& name,
                        const std::string& area = "dataset") {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  storage::BackendConfig config;
  config.file.direct = kind == "file-direct";
  std::string url;
  std::filesystem::path dir;
  if (kind == "mem") {
    url = "mem://" + area + "/" + name;
  } else {
    dir = scratch_dir(area) / (kind + "-" + name);
    std::filesystem::remove_all(dir);
    url = dir.string();
  }
  auto r = registry.open(url, config);
  REQUIRE(r);
  return {std::move(r->backend), r->key, dir};
}

// root + "/" + name, without doubling a '/' root ends in.
inline std::string join(const std::string& root, const std::string& name) {
  return root.empty() || root.ends_with('/') ? root + name : root + "/" + name;
}

// Some note holds both a and b.
inline bool mentions(const std::vector<std::string>& notes, std::string_view a,
                     std::string_view b = {}) {
  return std::any_of(notes.begin(), notes.end(), [&](const std::string& n) {
    return n.find(a) != std::string::npos && n.find(b) != std::string::npos;
  });
}

}  // namespace feedline::testing
