// libFuzzer target: S3's XML answers (listing pages, error bodies, multipart upload ids) come
// from the network; no body may crash the parser, and a listing it accepts is self-consistent.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "feedline/storage/s3_xml.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto page = feedline::storage::s3::parse_list_page(text)) {
    if (page->truncated && page->next_token.empty()) __builtin_trap();
    for (const auto& o : page->objects) {
      if (o.key.empty()) __builtin_trap();
    }
  }
  (void)feedline::storage::s3::parse_error(text);
  if (auto id = feedline::storage::s3::parse_upload_id(text)) {
    if (id->empty()) __builtin_trap();
  }
  return 0;
}
