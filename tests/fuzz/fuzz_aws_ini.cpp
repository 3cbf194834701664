// libFuzzer target: the AWS credentials/config file parser (storage/src/aws_config.cpp). It must
// never crash; a rejection names the file and line (and never quotes the line, which may hold a
// secret); an accepted file, written back out, parses to the same sections, keys and values.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "feedline/storage/aws_config.hpp"

namespace {

std::string serialize(const feedline::storage::IniFile& ini) {
  std::string out;
  for (const auto& [section, values] : ini) {
    out += "[" + section + "]\n";
    for (const auto& [key, value] : values) {
      out += key + " = ";
      std::string_view v = value;
      auto nl = v.find('\n');
      out += v.substr(0, nl);
      out += '\n';
      while (nl != std::string_view::npos) {  // continuation lines, indented
        v.remove_prefix(nl + 1);
        nl = v.find('\n');
        out += "  ";
        out += v.substr(0, nl);
        out += '\n';
      }
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto ini = feedline::storage::parse_aws_ini(text, "fuzz.ini");
  if (!ini) {
    const std::string what = ini.error().what();
    if (what.find("fuzz.ini") == std::string::npos || what.find("line ") == std::string::npos)
      __builtin_trap();
    return 0;
  }
  const std::string again_text = serialize(*ini);
  auto again = feedline::storage::parse_aws_ini(again_text, "again.ini");
  if (!again || *again != *ini) __builtin_trap();
  return 0;
}
