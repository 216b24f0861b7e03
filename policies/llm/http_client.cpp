#include "policies/llm/http_client.h"

#include <algorithm>
#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <charconv>

#include "engine/error.h"

namespace crl::llm {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

Endpoint parse_base_url(const std::string& url, const std::string& where) {
  const std::string_view scheme = "http://";
  if (url.rfind(scheme, 0) != 0) {
    throw Error(where, "",
                "LLM server URL " + quote(url) + " must start with http:// (https is not supported)");
  }
  std::string_view rest = std::string_view(url).substr(scheme.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  Endpoint out;
  if (slash != std::string_view::npos) {
    out.base_path = std::string(rest.substr(slash));
    while (!out.base_path.empty() && out.base_path.back() == '/') out.base_path.pop_back();
  }
  const size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos) {
    const std::string_view port = authority.substr(colon + 1);
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
      throw Error(where, "",
                  "LLM server URL " + quote(url) + ": port " + quote(std::string(port)) +
                      " is not a number in 1..65535");
    }
    out.port = static_cast<uint16_t>(value);
    authority = authority.substr(0, colon);
  }
  if (authority.empty()) throw Error(where, "", "LLM server URL " + quote(url) + " has no host");
  out.host = std::string(authority);
  return out;
}

std::optional<HttpOutcome> final_outcome_of_status(int status) {
  if (status >= 200 && status < 300) return HttpOutcome::kOk;
  if (status < 500) return HttpOutcome::kHttpError;
  return std::nullopt;
}

const char* http_outcome_name(HttpOutcome outcome) {
  switch (outcome) {
    case HttpOutcome::kOk:
      return "ok";
    case HttpOutcome::kHttpError:
      return "http_error";
    case HttpOutcome::kConnectionError:
      return "connection_error";
    case HttpOutcome::kTimeout:
      return "timeout";
    case HttpOutcome::kCancelled:
      return "cancelled";
  }
  return "?";
}

HttpClient::HttpClient(asio::io_context& io, HttpClientOptions options)
    : io_(io), options_(std::move(options)) {
  if (options_.max_in_flight == 0) options_.max_in_flight = 1;
}

HttpClient::~HttpClient() = default;

void HttpClient::cancel() {
  asio::post(io_, [this] { cancel_now(); });
}

void HttpClient::cancel_now() {
  cancelled_ = true;
  error_code ignored;
  for (Stream* stream : open_) stream->socket().close(ignored);
  for (asio::steady_timer* timer : timers_) timer->cancel();
  idle_.clear();
}

// Waits (in arrival order) until fewer than max_in_flight requests are running. A finishing request hands
// its slot straight to the oldest waiter, so a newcomer never overtakes the queue. False: cancelled, or the
// deadline passed while waiting.
asio::awaitable<bool> HttpClient::acquire_slot(Clock::time_point deadline) {
  if (cancelled_) co_return false;
  if (in_flight_ < options_.max_in_flight && waiting_.empty()) {
    ++in_flight_;
    co_return true;
  }
  Waiter waiter{asio::steady_timer(io_, deadline), false};
  waiting_.push_back(&waiter);
  timers_.insert(&waiter.timer);
  error_code ec;
  co_await waiter.timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  timers_.erase(&waiter.timer);
  if (waiter.granted) {
    if (!cancelled_) co_return true;
    release_slot();
    co_return false;
  }
  waiting_.erase(std::find(waiting_.begin(), waiting_.end(), &waiter));
  co_return false;
}

void HttpClient::release_slot() {
  if (waiting_.empty()) {
    --in_flight_;
    return;
  }
  Waiter* next = waiting_.front();
  waiting_.pop_front();
  next->granted = true;
  next->timer.cancel();
}

asio::awaitable<HttpResponse> HttpClient::post(std::string path, std::string body,
                                               std::vector<std::pair<std::string, std::string>> headers) {
  // Named locals, not temporaries inside the co_await expression: GCC 12 destroys such temporaries of a
  // coroutine wrongly (free(): invalid pointer).
  Body whole;
  whole.head = std::move(body);
  HttpResponse out = co_await post_parts(std::move(path), std::move(whole), std::move(headers));
  co_return out;
}

asio::awaitable<HttpResponse> HttpClient::post_parts(
    std::string path, Body body, std::vector<std::pair<std::string, std::string>> headers) {
  HttpResponse out = co_await send("POST", std::move(path), std::move(body), std::move(headers));
  co_return out;
}

asio::awaitable<HttpResponse> HttpClient::get(std::string path,
                                              std::vector<std::pair<std::string, std::string>> headers) {
  Body none;  // a named local: see post()
  HttpResponse out = co_await send("GET", std::move(path), std::move(none), std::move(headers));
  co_return out;
}

asio::awaitable<HttpResponse> HttpClient::send(const char* method, std::string path, Body body,
                                               std::vector<std::pair<std::string, std::string>> headers) {
  const bool has_body = std::string_view(method) != "GET";
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(options_.request_timeout_s));
  HttpResponse out;
  ++stats_.requests;
  auto finish = [&](HttpOutcome outcome, std::string error) {
    out.outcome = outcome;
    out.error = std::move(error);
    out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  };
  if (!co_await acquire_slot(deadline)) {
    finish(cancelled_ ? HttpOutcome::kCancelled : HttpOutcome::kTimeout,
           cancelled_ ? "cancelled" : "the deadline passed while waiting for a free request slot");
    co_return out;
  }
  struct SlotGuard {
    HttpClient* client;
    ~SlotGuard() { client->release_slot(); }
  } guard{this};

  // The request head, written here (the fields Beast's serializer wrote: Host, Content-Type, Accept, the
  // caller's headers, Content-Length; HTTP/1.1 keeps the connection alive without a Connection field), so
  // that head and body pieces go out in one gather write. A header with a CR or LF (not possible from the
  // gateway, whose values come from parsed request headers) is dropped rather than split the head.
  std::string head;
  head.reserve(256);
  head += method;
  head += ' ';
  head += options_.endpoint.base_path;
  head += path;
  head += " HTTP/1.1\r\nHost: ";
  head += options_.endpoint.host;
  head += ':';
  head += std::to_string(options_.endpoint.port);
  head += has_body ? "\r\nContent-Type: application/json\r\nAccept: application/json\r\n"
                   : "\r\nAccept: application/json\r\n";
  for (const auto& [name, value] : headers) {
    if ((name + value).find_first_of("\r\n") != std::string::npos) continue;
    head += name;
    head += ": ";
    head += value;
    head += "\r\n";
  }
  if (has_body) {
    head += "Content-Length: ";
    head += std::to_string(body.size());
    head += "\r\n";
  }
  head += "\r\n";
  const std::array<asio::const_buffer, 4> request{asio::buffer(head), asio::buffer(body.head),
                                                  asio::buffer(body.borrowed.data(), body.borrowed.size()),
                                                  asio::buffer(body.tail)};

  int failures = 0;  // counted attempts that failed (retries used)
  bool free_retry_used = false;
  while (true) {
    if (cancelled_) {
      finish(HttpOutcome::kCancelled, "cancelled");
      co_return out;
    }
    if (Clock::now() >= deadline) {
      finish(HttpOutcome::kTimeout, "the deadline of " + std::to_string(options_.request_timeout_s) +
                                        " s passed after " + std::to_string(out.attempts) + " attempts");
      co_return out;
    }
    ++out.attempts;
    ++stats_.attempts;
    std::unique_ptr<Stream> stream;
    bool reused = false;
    if (!idle_.empty()) {
      stream = std::move(idle_.back());
      idle_.pop_back();
      reused = true;
    } else {
      stream = std::make_unique<Stream>(io_);
    }
    open_.insert(stream.get());
    struct OpenGuard {
      std::set<Stream*>& open;
      Stream* stream;
      ~OpenGuard() { open.erase(stream); }
    } open_guard{open_, stream.get()};
    stream->expires_at(deadline);

    error_code ec;
    bool answer_started = false;
    http::response_parser<http::string_body> parser;
    parser.body_limit(options_.max_response_bytes);
    beast::flat_buffer buffer;
    if (!reused) {
      if (resolved_.empty()) {
        asio::ip::tcp::resolver resolver(io_);
        auto results =
            co_await resolver.async_resolve(options_.endpoint.host, std::to_string(options_.endpoint.port),
                                            asio::redirect_error(asio::use_awaitable, ec));
        if (!ec) {
          for (const auto& entry : results) resolved_.push_back(entry.endpoint());
        }
      }
      if (!ec) {
        ++stats_.connections_opened;
        co_await stream->async_connect(resolved_, asio::redirect_error(asio::use_awaitable, ec));
      }
    }
    if (!ec && !cancelled_)
      co_await asio::async_write(*stream, request, asio::redirect_error(asio::use_awaitable, ec));
    if (!ec && !cancelled_) {
      co_await http::async_read_header(*stream, buffer, parser,
                                       asio::redirect_error(asio::use_awaitable, ec));
      answer_started = !ec || buffer.size() > 0;
      if (!ec)
        co_await http::async_read(*stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
    }
    if (cancelled_) {
      finish(HttpOutcome::kCancelled, "cancelled");
      co_return out;
    }
    if (ec == beast::error::timeout || (ec && Clock::now() >= deadline)) {
      finish(HttpOutcome::kTimeout, "the deadline of " + std::to_string(options_.request_timeout_s) +
                                        " s passed (" + ec.message() + ")");
      co_return out;
    }
    std::string failure;
    if (ec) {
      if (reused && !answer_started && !free_retry_used) {
        free_retry_used = true;  // a stale keep-alive connection: retry at once on a fresh one
        continue;
      }
      failure = "connection error: " + ec.message();
      out.status = 0;
      out.body.clear();
    } else {
      auto& response = parser.get();
      out.status = response.result_int();
      out.body = std::move(response.body());
      if (response.keep_alive() && !cancelled_) {
        stream->expires_never();
        open_.erase(stream.get());
        idle_.push_back(std::move(stream));
      }
      failure = "HTTP " + std::to_string(out.status);
      if (const auto outcome = final_outcome_of_status(out.status)) {
        finish(*outcome, *outcome == HttpOutcome::kOk ? "" : failure);
        co_return out;
      }
    }
    if (failures >= options_.max_retries) {
      finish(ec ? HttpOutcome::kConnectionError : HttpOutcome::kHttpError,
             failure + " after " + std::to_string(out.attempts) + " attempts");
      co_return out;
    }
    // Exponential backoff, cut short by the deadline or cancel().
    const double wait = options_.backoff_s * static_cast<double>(1u << std::min(failures, 20));
    ++failures;
    ++stats_.retries;
    auto wake =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait));
    if (wake > deadline) wake = deadline;
    asio::steady_timer timer(io_, wake);
    timers_.insert(&timer);
    error_code wait_ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, wait_ec));
    timers_.erase(&timer);
  }
}

}  // namespace crl::llm
