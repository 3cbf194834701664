// The consumer of tests/install: writes two objects to a mem:// backend, opens them as a dataset
// (one sample per object), reads it through a Loader in batches of one and checks that each
// sample's bytes are the ones written. Only the installed public headers and libraries.
// Exit 0: both samples came back intact; 1: an error or wrong bytes (printed).
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "feedline/loader/dataset.hpp"
#include "feedline/loader/loader.hpp"
#include "feedline/storage/registry.hpp"

using namespace feedline;

// next() returns Result<std::optional<Batch>> (nullopt at the end) or, from the API of issue 15,
// Result<Batch> (end() at the end): these two overloads read both. Drop the optional ones when
// the new API is the only one.
static bool at_end(const std::optional<loader::Batch>& b) { return !b; }
static const loader::Batch& get(const std::optional<loader::Batch>& b) { return *b; }
template <class B>
static bool at_end(const B& b) {
  return b.end();
}
template <class B>
static const B& get(const B& b) {
  return b;
}

static int fail(const char* what, const Error& e) {
  std::fprintf(stderr, "consumer: %s: %s\n", what, e.what().c_str());
  return 1;
}

int main() {
  storage::Registry registry;
  storage::register_builtin_backends(registry);
  auto where = registry.open("mem://consumer/ds", {});
  if (!where) return fail("open mem://", where.error());

  const std::map<std::string, std::string> objects = {{"a.bin", "the first object"},
                                                      {"b.bin", "and the second, a little longer"}};
  for (const auto& [name, text] : objects) {
    auto wrote = where->backend->write(where->key + "/" + name,
                                       std::as_bytes(std::span(text.data(), text.size())));
    if (!wrote) return fail("write", wrote.error());
  }

  auto dataset = loader::open_dataset(*where->backend, where->key, {});
  if (!dataset) return fail("open_dataset", dataset.error());

  loader::LoaderConfig config;
  config.sampler.batch_size = 1;
  config.memory_budget = 16 << 20;
  config.lock_memory = false;
  auto loader = loader::Loader::open(*where->backend, *dataset, config);
  if (!loader) return fail("Loader::open", loader.error());

  unsigned samples = 0;
  for (;;) {
    auto result = (*loader)->next();
    if (!result) return fail("next", result.error());
    if (at_end(*result)) break;
    const loader::Batch& batch = get(*result);
    for (const loader::BatchSample& s : batch.samples()) {
      const std::string& want = objects.at(std::string(s.key) + ".bin");
      const auto got = batch.data().subspan(s.offset, s.size);
      if (got.size() != want.size() || std::memcmp(got.data(), want.data(), want.size()) != 0) {
        std::fprintf(stderr, "consumer: sample %.*s: wrong bytes\n", static_cast<int>(s.key.size()),
                     s.key.data());
        return 1;
      }
      ++samples;
    }
  }
  if (samples != objects.size()) {
    std::fprintf(stderr, "consumer: %u samples read, %zu written\n", samples, objects.size());
    return 1;
  }
  std::printf("consumer: %u samples read back intact\n", samples);
  return 0;
}
