// Escaping text for XML and HTML (S3's request bodies, the HTML report): & < > " ' as entities.
#pragma once

#include <string>
#include <string_view>

namespace feedline {

std::string markup_escape(std::string_view text);

}  // namespace feedline
