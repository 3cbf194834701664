// S3 endpoint and credentials of the s3:// driver (src/http/s3_backend.cpp), resolved by tools/
// the AWS way (environment, ~/.aws files, --endpoint). Empty keys mean unsigned (anonymous)
// requests. The HTTP settings it shares with http(s):// are in http_config.hpp.
#pragma once

#include <string>

namespace feedline::storage {

struct S3Config {
  std::string endpoint;  // scheme://host[:port]; empty = https://s3.<region>.amazonaws.com
  std::string region = "us-east-1";
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  bool path_style = true;  // bucket in the path (custom endpoints); false = virtual-hosted
};

}  // namespace feedline::storage
