#include "feedline/storage/s3_xml.hpp"

#include <fmt/format.h>

#include <charconv>
#include <pugixml.hpp>

namespace feedline::storage::s3 {
namespace {

bool load(pugi::xml_document& doc, std::string_view xml) {
  return doc.load_buffer(xml.data(), xml.size(), pugi::parse_default, pugi::encoding_utf8);
}

std::string_view first_line(std::string_view text) {
  text = text.substr(0, std::min<std::size_t>(text.find('\n'), 120));
  return text;
}

}  // namespace

Result<ListPage> parse_list_page(std::string_view xml) {
  pugi::xml_document doc;
  const pugi::xml_node root = load(doc, xml) ? doc.child("ListBucketResult") : pugi::xml_node();
  if (!root) {
    return fail(
        Error(Errc::kCorrupt,
              fmt::format("the answer to ListObjectsV2 is not an S3 listing (it starts "
                          "with '{}')",
                          first_line(xml)))
            .with_hint(
                "is the endpoint an S3-compatible server? check {endpoint} / AWS_ENDPOINT_URL"));
  }
  ListPage page;
  for (pugi::xml_node c : root.children("Contents")) {
    ObjectInfo info;
    info.key = c.child_value("Key");
    const std::string_view size = c.child_value("Size");
    auto [p, ec] = std::from_chars(size.data(), size.data() + size.size(), info.size);
    if (info.key.empty() || ec != std::errc() || p != size.data() + size.size()) {
      return fail(Error(Errc::kCorrupt,
                        fmt::format("a listing entry without a valid Key and Size ('{}', '{}')",
                                    info.key, size)));
    }
    page.objects.push_back(std::move(info));
  }
  page.truncated = std::string_view(root.child_value("IsTruncated")) == "true";
  page.next_token = root.child_value("NextContinuationToken");
  if (page.truncated && page.next_token.empty()) {
    return fail(Errc::kCorrupt, "a truncated listing without a NextContinuationToken");
  }
  return page;
}

std::optional<ErrorBody> parse_error(std::string_view body) {
  pugi::xml_document doc;
  if (!load(doc, body)) return std::nullopt;
  const pugi::xml_node e = doc.child("Error");
  if (!e) return std::nullopt;
  return ErrorBody{e.child_value("Code"), e.child_value("Message")};
}

Result<std::string> parse_upload_id(std::string_view xml) {
  pugi::xml_document doc;
  const pugi::xml_node r =
      load(doc, xml) ? doc.child("InitiateMultipartUploadResult") : pugi::xml_node();
  const std::string id = r ? r.child_value("UploadId") : "";
  if (id.empty()) {
    return fail(Error(
        Errc::kCorrupt,
        fmt::format("no UploadId in the answer to CreateMultipartUpload ('{}')", first_line(xml))));
  }
  return id;
}

}  // namespace feedline::storage::s3
