#pragma once
// The body type of the requests the server reads (RequestParser in server/http_request.h): a std::string,
// like Beast's string_body, filled by appending each piece the parser hands over. Beast's string_body grows
// the string with resize() and then copies into it, so every body was written twice (zeros, then the
// bytes): for a gateway call's ~9 KB body that memset was ~9k instructions (callgrind counts its
// `rep stosb` a byte at a time; bench/RESULTS.md eleventh pass). Limits stay the parser's (body_limit: 413);
// a declared length is reserved once.
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>
#include <cstdint>
#include <string>

namespace crl::server {

struct AppendedStringBody {
  using value_type = std::string;

  static std::uint64_t size(const value_type& body) { return body.size(); }

  class reader {
   public:
    template <bool kIsRequest, class Fields>
    reader(boost::beast::http::header<kIsRequest, Fields>&, value_type& body) : body_(body) {}

    void init(const boost::optional<std::uint64_t>& length, boost::beast::error_code& ec) {
      ec = {};
      if (!length) return;
      if (*length > body_.max_size()) {
        ec = boost::beast::http::error::buffer_overflow;
        return;
      }
      body_.reserve(static_cast<size_t>(*length));
    }

    template <class ConstBufferSequence>
    size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      ec = {};
      size_t taken = 0;
      for (const auto buffer : boost::beast::buffers_range_ref(buffers)) {
        if (buffer.size() > body_.max_size() - body_.size()) {
          ec = boost::beast::http::error::buffer_overflow;
          return taken;
        }
        body_.append(static_cast<const char*>(buffer.data()), buffer.size());
        taken += buffer.size();
      }
      return taken;
    }

    void finish(boost::beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

}  // namespace crl::server
