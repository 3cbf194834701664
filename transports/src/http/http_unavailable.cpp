// The HTTP transport when feedline is built without libcurl (FEEDLINE_WITH_HTTP=OFF).
#include "feedline/transports/http_client.hpp"

namespace feedline::transports {

Result<std::unique_ptr<HttpClient>> HttpClient::create(const HttpClientOptions&) {
  return fail(Errc::kUnsupported, "built without the HTTP transport (libcurl)");
}

Result<HttpResponse> HttpClient::perform(HttpRequest) {
  return fail(Errc::kUnsupported, "built without the HTTP transport (libcurl)");
}

Result<HttpLibrary> HttpLibrary::init() { return HttpLibrary(); }
HttpLibrary::HttpLibrary(HttpLibrary&&) noexcept = default;
HttpLibrary& HttpLibrary::operator=(HttpLibrary&&) noexcept = default;
HttpLibrary::~HttpLibrary() = default;
void HttpLibrary::release() noexcept {}
bool HttpLibrary::held() noexcept { return false; }

std::string http_library_version() { return "not built in"; }
bool http_compiled_in() noexcept { return false; }

std::string uri_encode(std::string_view text, bool) { return std::string(text); }

}  // namespace feedline::transports
