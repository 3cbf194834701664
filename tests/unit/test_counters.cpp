// Backend counters as a typed contract (storage/counters.hpp): every definition is well formed and
// found by its name; the docs list exactly the defined names (each definition on its producer's
// page, each name a page lists defined); QueueStats reaches them through their definitions.
// Elsewhere: the Prometheus endpoint serves each as its role says and a retry is published once
// (test_live.cpp); the producers count theirs (test_http_queue.cpp, test_decorators.cpp,
// tests/cli/nfs.sh); a run against nginx reports every HTTP name (tests/cli/http_nginx.sh).
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include "feedline/storage/backend.hpp"
#include "feedline/storage/counters.hpp"

using namespace feedline;
using namespace feedline::storage;
namespace sc = feedline::storage::counters;

namespace counters_test {

std::string read_doc(const std::string& relative) {
  const std::string path = std::string(FEEDLINE_SOURCE_DIR) + "/docs/" + relative;
  std::ifstream in(path);
  REQUIRE(in);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The page that lists a producer's names.
std::string doc_of(std::string_view producer) {
  if (producer == "http") return "backends/http.md";
  if (producer == "nfs") return "backends/nfs.md";
  if (producer == "faults") return "DESIGN.md";
  return "CLI.md";  // live names: the Prometheus section
}

// The text of a page from a heading on to the next heading of any level.
std::string section(const std::string& page, const std::string& heading) {
  const auto at = page.find("\n" + heading + "\n");
  REQUIRE(at != std::string::npos);
  const auto end = page.find("\n#", at + heading.size() + 2);
  return page.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// Every `name` in backquotes that looks like a counter: lower case, digits, '_' (and a family's
// "<...>" tail). (A scan, not std::regex: GCC 12's <regex> warns of uninitialised members under
// ASan's -O1, and warnings are errors.)
bool counter_like(std::string_view s) {
  const auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (s.empty() || !lower(s[0])) return false;
  std::size_t i = 1;
  while (i < s.size() && (lower(s[i]) || digit(s[i]) || s[i] == '_')) ++i;
  if (i == s.size()) return true;
  if (s[i] != '<' || s.back() != '>' || i + 2 >= s.size()) return false;
  const std::string_view tail = s.substr(i + 1, s.size() - i - 2);
  return std::all_of(tail.begin(), tail.end(), lower);
}

std::set<std::string> quoted_names(const std::string& text) {
  std::set<std::string> out;
  for (std::size_t open = text.find('`'); open != std::string::npos;) {
    const std::size_t close = text.find('`', open + 1);
    if (close == std::string::npos) break;
    const std::string_view inside(text.data() + open + 1, close - open - 1);
    if (counter_like(inside)) {
      out.emplace(inside);
      open = text.find('`', close + 1);
    } else {
      open = close;  // the closing quote may open the next name, as a regex would find it
    }
  }
  return out;
}

// The definition a documented name stands for: "http_status_<code>" -> the family
// "http_status_"; an exact name, or a family's member ("http_status_206"), as find_counter().
const CounterDef* definition_of(const std::string& documented) {
  const auto lt = documented.find('<');
  if (lt == std::string::npos) return find_counter(documented);
  const std::string prefix = documented.substr(0, lt);
  for (const CounterDef* d : sc::kAll)
    if (d->family && d->name == prefix) return d;
  return nullptr;
}

}  // namespace counters_test

using namespace counters_test;

TEST_CASE("counters: each definition is well formed and found by its name", "[counters]") {
  std::set<std::string_view> names;
  for (const CounterDef* d : sc::kAll) {
    INFO(d->name);
    CHECK(names.insert(d->name).second);
    CHECK_FALSE(d->help.empty());
    CHECK_FALSE(d->producer.empty());
    CHECK(d->family == d->name.ends_with('_'));
    if (d->family) {
      CHECK(find_counter(member_name(*d, "x1")) == d);
      CHECK(find_counter(d->name) == nullptr);  // the prefix alone is no member
    } else {
      CHECK(find_counter(d->name) == d);
    }
    if (d->role == CounterRole::kRetry && !d->family) CHECK_FALSE(d->retry_reason.empty());
    if (d->kind == CounterKind::kHistogram) CHECK(d->unit == CounterUnit::kNanoseconds);
    if (d->live) CHECK(d->kind == CounterKind::kTotal);
  }
  CHECK(retry_reason("http_retry_http_503") == "http_503");
  CHECK(retry_reason("http_retry_reset") == "reset");
  CHECK(retry_reason("nfs_retries") == "nfs");
  CHECK(retry_reason("io_retries") == "io");
  CHECK_FALSE(retry_reason("http_retries"));  // the sum of the reasons, no reason of its own
  CHECK_FALSE(retry_reason("reconnects"));
  CHECK(find_counter("an_embedders_own_counter") == nullptr);
  CHECK(counter_text("copied_bytes", 3u << 20) == "copied_bytes 3.00 MiB");
  CHECK(counter_text("http_requests", 12) == "http_requests 12");
}

TEST_CASE("counters: the docs list exactly the defined names", "[counters]") {
  // Each definition on its producer's page.
  for (const CounterDef* d : sc::kAll) {
    INFO(d->name << " on " << doc_of(d->producer));
    const std::string page = read_doc(doc_of(d->producer));
    const std::string quoted =
        d->family ? fmt::format("`{}<", d->name) : fmt::format("`{}`", d->name);
    CHECK(page.find(quoted) != std::string::npos);
  }
  // Each name the pages' counter sections list, defined: the first column of http.md's table,
  // the names nfs.md's report section gives.
  std::string http;
  std::istringstream rows(section(read_doc("backends/http.md"), "## Metrics"));
  for (std::string row; std::getline(rows, row);) {
    if (row.starts_with("| `")) http += row.substr(0, row.find('|', 1)) + "\n";
  }
  const std::string nfs = section(read_doc("backends/nfs.md"), "## Report");
  std::size_t documented = 0;
  for (const std::string& text : {http, nfs}) {
    for (const std::string& name : quoted_names(text)) {
      if (name.starts_with("feedline_")) continue;  // a Prometheus family
      INFO(name);
      CHECK(definition_of(name) != nullptr);
      ++documented;
    }
  }
  CHECK(documented >= 15);
}

TEST_CASE("counters: QueueStats reaches names through their definitions", "[counters]") {
  QueueStats st;
  CHECK(st.counter(sc::kHttpRequests) == 0);
  CHECK(st.counters.empty());  // reading makes nothing
  st.start({&sc::kHttpRequests, &sc::kHttpStatus, &sc::kTtfb, &sc::kIoRetries});
  CHECK(st.counters.size() == 1);  // neither the family nor the live name
  CHECK(st.counters.at("http_requests") == 0);
  REQUIRE(st.find_histogram(sc::kTtfb) != nullptr);
  CHECK(st.find_histogram(sc::kRtt) == nullptr);
  ++st.count(sc::kHttpStatus, "206");
  st.count(sc::kHttpStatus, "206") += 2;
  CHECK(st.counters.at("http_status_206") == 3);
  // A member longer than the stack buffer still lands under its whole name.
  const std::string long_member(200, 'x');
  ++st.count(sc::kHttpRetry, long_member);
  CHECK(st.counters.at("http_retry_" + long_member) == 1);
}
