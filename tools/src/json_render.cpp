#include "json_render.hpp"

#include <utility>

#include "feedline/core/text.hpp"
#include "feedline/loader/report_json.hpp"

namespace feedline::tools {
namespace {

bool all_utf8(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::string:
      return is_utf8(j.get_ref<const std::string&>());
    case nlohmann::json::value_t::array:
      for (const auto& e : j) {
        if (!all_utf8(e)) return false;
      }
      return true;
    case nlohmann::json::value_t::object:
      for (const auto& [k, v] : j.items()) {
        if (!is_utf8(k) || !all_utf8(v)) return false;
      }
      return true;
    default:
      return true;
  }
}

}  // namespace

void make_utf8(nlohmann::json& doc) {
  switch (doc.type()) {
    case nlohmann::json::value_t::string: {
      auto& s = doc.get_ref<std::string&>();
      if (!is_utf8(s)) s = utf8_text(s);
      return;
    }
    case nlohmann::json::value_t::array:
      for (auto& e : doc) make_utf8(e);
      return;
    case nlohmann::json::value_t::object: {
      bool keys_ok = true;
      for (auto& [k, v] : doc.items()) {
        keys_ok = keys_ok && is_utf8(k);
        make_utf8(v);
      }
      if (keys_ok) return;
      // Keys cannot be changed in place: the object again, with its keys rewritten. Two keys
      // that come out the same (one spelling the other's \xHH) keep the first's value.
      nlohmann::json fixed = nlohmann::json::object();
      for (auto& [k, v] : doc.items()) fixed.emplace(utf8_text(k), std::move(v));
      doc = std::move(fixed);
      return;
    }
    default:
      return;
  }
}

std::string dump_json(const nlohmann::json& doc, int indent, Json form) {
  const bool ascii = form == Json::kAscii;
  if (all_utf8(doc)) return doc.dump(indent, ' ', ascii);
  nlohmann::json copy = doc;
  make_utf8(copy);
  return copy.dump(indent, ' ', ascii);
}

nlohmann::json histogram_json(const Histogram& h) {
  return nlohmann::json::parse(loader::histogram_json(h));
}

nlohmann::json io_stats_json(const storage::QueueStats& s) {
  return nlohmann::json::parse(loader::io_stats_json(s));
}

}  // namespace feedline::tools
