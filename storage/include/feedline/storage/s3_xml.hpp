// The XML documents S3 answers with, parsed with pugixml (inside src/http/s3_xml.cpp):
// ListObjectsV2 pages, error bodies and multipart-upload ids. Exposed for tests and fuzzing.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/storage/backend.hpp"

namespace feedline::storage::s3 {

struct ListPage {
  std::vector<ObjectInfo>
      objects;  // keys as S3 returns them (not URL-decoded: we never ask for encoding-type=url)
  bool truncated = false;
  std::string next_token;
};

// kCorrupt when the body is not a ListBucketResult (a server that is not S3, an HTML page).
Result<ListPage> parse_list_page(std::string_view xml);

struct ErrorBody {
  std::string code;  // "NoSuchBucket", "SignatureDoesNotMatch", ...
  std::string message;
};
std::optional<ErrorBody> parse_error(std::string_view body);

// The UploadId of an InitiateMultipartUploadResult.
Result<std::string> parse_upload_id(std::string_view xml);

}  // namespace feedline::storage::s3
