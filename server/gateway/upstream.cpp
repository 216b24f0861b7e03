// The upstream call (upstream.h): its HTTP exchange on a lane, a streamed answer read as it arrives, and the
// answer read into the call's result. The lanes and their waits are upstream_lanes.cpp.
#include "server/gateway/upstream.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <optional>

#include "engine/error.h"
#include "engine/sse_reader.h"
#include "policies/llm/streamed_answer.h"
#include "server/fiber.h"
#include "server/gateway/stream_keepalive.h"

namespace crl::server::gateway {

namespace asio = boost::asio;

namespace {
llm::HttpClientOptions client_options(const UpstreamOptions& options) {
  llm::HttpClientOptions out;
  out.endpoint = llm::parse_base_url(options.base_url, "option --llm");
  out.max_in_flight = options.max_in_flight;
  out.request_timeout_s = options.request_timeout_s;
  out.max_retries = options.max_retries;
  out.backoff_s = options.backoff_s;
  return out;
}
}  // namespace

Upstream::Upstream(UpstreamOptions options)
    : options_(std::move(options)),
      http_(client_options(options_)),
      lookup_(http_.endpoint.host, http_.endpoint.port) {}

Upstream::~Upstream() = default;  // no call is in flight: the server's workers have stopped

// A streamed answer read as its body arrives: its events (engine/sse_reader.h) read into the answer so far
// (policies/llm/streamed_answer.h), whose new ids go to the call's SampledTokens at once (once per read).
// Only an answer that is a 200 event stream is read so; any other (an error status, a server that answered
// whole) is read whole as before.
struct Upstream::StreamRead {
  StreamRead(llm::ApiKind kind, SampledTokens* sink, size_t max_event_bytes, int vocab_size, int top_logprobs,
             llm::SentPrompt sent)
      : kind(kind),
        sink(sink),
        max_event_bytes(max_event_bytes),
        vocab_size(vocab_size),
        top_logprobs(top_logprobs),
        sent(sent),
        events(max_event_bytes),
        answer(kind, vocab_size, top_logprobs, sent) {}
  // Another attempt: nothing read yet (never once ids went to the sink).
  void restart() {
    events = SseReader(max_event_bytes);
    answer = llm::StreamedAnswer(kind, vocab_size, top_logprobs, sent);
    decided = active = done = false;
    failure.clear();
  }
  // The answer's head is in: whether its body is an event stream to read as it comes.
  void decide(int status, std::string_view content_type) {
    decided = true;
    active = status == 200 && content_type.substr(0, 17) == "text/event-stream";
  }
  // Reads the events in `body` (the bytes since the last call, then cleared). False once the stream cannot
  // be read on (failure says why).
  bool take(std::string& body) {
    if (!events.feed(body)) failure = "the stream's " + events.error();
    body.clear();
    SseEvent event;
    while (failure.empty() && events.next(event)) {
      if (event.data == "[DONE]") {
        done = true;
        continue;
      }
      if (done || !answer.add(event.data)) {
        failure = done ? "an event came after [DONE]" : answer.error();
        break;
      }
    }
    // Once per read, not per event: events that came together (a server ahead of the gateway) go on as one.
    if (failure.empty() && answer.answer().ids.size() > passed) {
      passed = answer.answer().ids.size();
      sink->sampled(answer.answer());
    }
    return failure.empty();
  }

  llm::ApiKind kind;
  SampledTokens* sink;
  size_t max_event_bytes;
  int vocab_size, top_logprobs;
  llm::SentPrompt sent;
  SseReader events;
  llm::StreamedAnswer answer;
  bool decided = false, active = false, done = false;
  size_t passed = 0;    // ids that went to the sink
  std::string failure;  // why the stream could not be read (the call fails, with no retry)
};

// One call's HTTP exchange with the semantics of llm::HttpClient (policies/llm/http_client.h): the deadline
// covers every attempt and backoff; retries with exponential backoff on connection errors and 5xx only; a
// failure on a reused keep-alive connection before any answer byte is retried at once on a fresh one
// without counting; cancel() ends it as kCancelled.
llm::HttpResponse Upstream::exchange(Lane& lane, const std::string& head, const llm::RequestParts& body,
                                     StreamKeepalive* keepalive, StreamRead* stream) {
  namespace http = boost::beast::http;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(http_.request_timeout_s));
  // A streamed call's keep-alive: every wait wakes when a beat is due (the deadline is unchanged).
  const bool beating = keepalive != nullptr && keepalive->active();
  const auto next_beat = [&] { return beating ? keepalive->due() : Clock::time_point::max(); };
  // A wait (connect, send, backoff) that beats while it lasts; kTimeout only at `until`.
  const auto wait_beating = [&](int fd, short events, Clock::time_point until) {
    while (true) {
      const Clock::time_point beat_at = next_beat();
      const Wait w = wait(lane, fd, events, std::min(until, beat_at));
      if (w != Wait::kTimeout || beat_at >= until) return w;
      keepalive->beat();
    }
  };
  llm::HttpResponse out;
  auto finish = [&](llm::HttpOutcome outcome, std::string error) {
    out.outcome = outcome;
    out.error = std::move(error);
    out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return out;
  };
  const auto close_connection = [&] {
    if (lane.fd >= 0) close_fd(lane, lane.fd);
    lane.fd = -1;
  };
  // (Written only when needed: formatting a double cost a tenth of a call's I/O.)
  const auto timeout_text = [&] {
    char seconds[32];
    const char* end = std::to_chars(seconds, seconds + sizeof(seconds), http_.request_timeout_s).ptr;
    return "the deadline of " + std::string(static_cast<const char*>(seconds), end) + " s passed";
  };
  int failures = 0;
  bool free_retry_used = false;
  while (true) {
    if (Clock::now() >= deadline)
      return finish(llm::HttpOutcome::kTimeout,
                    timeout_text() + " after " + std::to_string(out.attempts) + " attempts");
    ++out.attempts;
    if (stream != nullptr) stream->restart();  // (a retry: no id went on from the attempt before)
    const bool reused = lane.fd >= 0;
    std::string failure;  // a connection error (empty: none)
    bool answer_started = false;
    bool timed_out = false, cancelled = false;
    std::string stage;  // where the deadline passed, when not at the socket
    const auto waited = [&](Wait w) {
      if (w == Wait::kTimeout) timed_out = true;
      if (w == Wait::kCancelled) cancelled = true;
      return w == Wait::kReady;
    };
    if (!reused) {
      Wait lookup = Wait::kReady;
      const std::vector<HostAddress> addresses = resolve(lane, deadline, lookup, failure);
      if (!waited(lookup)) stage = " while looking up " + http_.endpoint.host;
      if (failure.empty()) failure = "no address";
      for (const HostAddress& a : addresses) {
        if (lane.fd >= 0 || timed_out || cancelled) break;
        const int fd = ::socket(a.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
          failure = std::string("socket: ") + std::strerror(errno);
          continue;
        }
        if (::connect(fd, reinterpret_cast<const sockaddr*>(&a.address), a.length) != 0 &&
            errno != EINPROGRESS) {
          failure = std::string("connect: ") + std::strerror(errno);
          ::close(fd);
          continue;
        }
        if (!waited(wait_beating(fd, POLLOUT, deadline))) {
          close_fd(lane, fd);
          break;
        }
        int error = 0;
        socklen_t len = sizeof error;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
        if (error != 0) {
          failure = std::string("connect: ") + std::strerror(error);
          close_fd(lane, fd);
          continue;
        }
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        lane.fd = fd;
        failure.clear();
      }
    }
    // The request: one gather write of the head and the body's pieces (no copy of the id text).
    if (lane.fd >= 0 && failure.empty() && !timed_out && !cancelled) {
      iovec parts[4] = {{const_cast<char*>(head.data()), head.size()},
                        {const_cast<char*>(body.head.data()), body.head.size()},
                        {const_cast<char*>(body.ids.data()), body.ids.size()},
                        {const_cast<char*>(body.tail.data()), body.tail.size()}};
      size_t first = 0;
      while (first < 4) {
        if (parts[first].iov_len == 0) {
          ++first;
          continue;
        }
        msghdr message{};
        message.msg_iov = parts + first;
        message.msg_iovlen = 4 - first;
        const ssize_t n = ::sendmsg(lane.fd, &message, MSG_NOSIGNAL);
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (!waited(wait_beating(lane.fd, POLLOUT, deadline))) break;
            continue;
          }
          failure = std::string("connection error: ") + std::strerror(errno);
          break;
        }
        size_t sent = static_cast<size_t>(n);
        while (first < 4 && sent >= parts[first].iov_len) {
          sent -= parts[first].iov_len;
          ++first;
        }
        if (first < 4) {
          parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + sent;
          parts[first].iov_len -= sent;
        }
      }
    }
    // The answer, parsed by Beast's parser as the bytes come.
    bool leftover = false;
    http::response_parser<http::string_body> parser;
    parser.body_limit(http_.max_response_bytes);
    parser.eager(true);
    if (lane.fd >= 0 && failure.empty() && !timed_out && !cancelled) {
      std::string buffer;
      size_t used = 0;  // parsed bytes at the front of `buffer`
      char chunk[65536];
      while (!parser.is_done()) {
        if (used < buffer.size()) {
          boost::beast::error_code ec;
          const size_t n = parser.put(boost::asio::buffer(buffer.data() + used, buffer.size() - used), ec);
          used += n;
          if (ec && ec != http::error::need_more) {
            failure = "connection error: " + ec.message();
            break;
          }
          if (stream != nullptr && parser.is_header_done()) {
            if (!stream->decided) {
              const auto type = parser.get()[http::field::content_type];
              stream->decide(parser.get().result_int(), std::string_view(type.data(), type.size()));
            }
            if (stream->active) {
              if (!stream->take(parser.get().body())) break;  // (its failure fails the call)
              // What was read went on: the limit bounds each chunk, the reader the event being read.
              parser.body_limit(http_.max_response_bytes);
            }
          }
          if (parser.is_done()) break;
          if (n > 0 && !ec) continue;
        }
        size_t got = 0;
        std::string read_error;
        Wait w;
        const Clock::time_point beat_at = next_beat();
        if (beating) {
          // A wait for readiness, then recv: a fiber's read that the beat's timer cuts short may already
          // have taken bytes, which its late completion drops (fatal mid-answer); a wait consumes nothing.
          w = wait(lane, lane.fd, POLLIN, std::min(deadline, beat_at));
          if (w == Wait::kReady) {
            const ssize_t n = ::recv(lane.fd, chunk, sizeof chunk, 0);
            if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
            if (n < 0) read_error = std::strerror(errno);
            got = n > 0 ? static_cast<size_t>(n) : 0;
          }
        } else {
          w = read(lane, chunk, sizeof chunk, deadline, got, read_error);
        }
        if (w == Wait::kTimeout && beat_at < deadline) {  // another period without the answer
          keepalive->beat();
          continue;
        }
        if (!waited(w)) break;
        if (!read_error.empty()) {
          failure = "connection error: " + read_error;
          break;
        }
        if (got > 0) {
          answer_started = true;
          if (used == buffer.size()) {
            buffer.clear();
            used = 0;
          }
          buffer.append(chunk, got);
          continue;
        }
        if (parser.got_some() && parser.need_eof()) {  // the upstream closed the connection
          boost::beast::error_code ec;
          parser.put_eof(ec);
          if (!ec) break;
        }
        failure = "connection error: the server closed the connection before a whole answer";
        break;
      }
      leftover = used < buffer.size();  // bytes past the answer: not a connection to reuse
    }
    if (stream != nullptr && !stream->failure.empty()) {  // an event the stream cannot go on from
      close_connection();
      out.status = 200;
      return finish(llm::HttpOutcome::kOk, "");
    }
    if (cancelled) {
      close_connection();
      return finish(llm::HttpOutcome::kCancelled, "cancelled");
    }
    if (timed_out) {
      close_connection();
      return finish(llm::HttpOutcome::kTimeout, timeout_text() + stage);
    }
    if (!failure.empty()) {
      close_connection();
      if (stream != nullptr && stream->passed > 0)  // ids went on: another attempt would sample them again
        return finish(llm::HttpOutcome::kConnectionError, failure + " (while the answer streamed)");
      if (reused && !answer_started && !free_retry_used) {
        free_retry_used = true;  // a stale keep-alive connection: retry at once on a fresh one
        continue;
      }
      out.status = 0;
      out.body.clear();
    } else {
      auto& response = parser.get();
      out.status = response.result_int();
      out.body = std::move(response.body());
      if (!response.keep_alive() || leftover) close_connection();
      failure = "HTTP " + std::to_string(out.status);
      if (const auto outcome = llm::final_outcome_of_status(out.status)) {
        return finish(*outcome, *outcome == llm::HttpOutcome::kOk ? "" : failure);
      }
    }
    const bool connection_error = out.status == 0;
    if (failures >= http_.max_retries) {
      return finish(connection_error ? llm::HttpOutcome::kConnectionError : llm::HttpOutcome::kHttpError,
                    failure + " after " + std::to_string(out.attempts) + " attempts");
    }
    // Exponential backoff, cut short by the deadline or cancel().
    const double backoff = http_.backoff_s * static_cast<double>(1u << std::min(failures, 20));
    ++failures;
    auto wake =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(backoff));
    if (wake > deadline) wake = deadline;
    if (wait_beating(-1, 0, wake) == Wait::kCancelled)
      return finish(llm::HttpOutcome::kCancelled, "cancelled");
  }
}

UpstreamResult Upstream::generate(const UpstreamCall& call) {
  llm::GenerateCall generate;
  generate.prompt = call.prompt;
  generate.prompt_ids_json = call.prompt_ids_json;
  generate.max_new_tokens = call.max_new_tokens;
  generate.sampling_seed = call.sampling_seed;
  generate.rid = call.rid;
  const bool streamed = call.sampled != nullptr;
  generate.stream = streamed;
  // The body in pieces: the session's cached id text (call.prompt_ids_json, ~40 KB at 8k tokens) is sent
  // from where it is, never copied into a body string (one gather write with the head).
  llm::RequestParts parts;
  llm::write_request_parts(options_.api, generate, call.sampling, parts);
  const size_t length = parts.head.size() + parts.ids.size() + parts.tail.size();
  std::string head;
  head.reserve(256);
  head += "POST ";
  head += http_.endpoint.base_path;
  head += llm::api_path(options_.api);
  head += " HTTP/1.1\r\nHost: ";
  head += http_.endpoint.host;
  head += ':';
  head += std::to_string(http_.endpoint.port);
  head += streamed ? "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n"
                   : "\r\nContent-Type: application/json\r\nAccept: application/json\r\n";
  // The harness's routing key comes from a parsed header (no CR or LF); checked anyway.
  if (!call.routing_key.empty() && call.routing_key.find_first_of("\r\n") == std::string::npos) {
    head += "X-SMG-Routing-Key: ";
    head += call.routing_key;
    head += "\r\n";
  }
  head += "Content-Length: ";
  head += std::to_string(length);
  head += "\r\n\r\n";
  std::optional<StreamRead> stream;
  if (streamed)
    stream.emplace(options_.api, call.sampled, http_.max_response_bytes, options_.vocab_size,
                   call.sampling.top_logprobs, llm::SentPrompt{call.prompt, call.prompt_ids_json});
  std::unique_ptr<Lane> lane = acquire();
  const llm::HttpResponse response =
      exchange(*lane, head, parts, call.keepalive, stream ? &*stream : nullptr);
  release(std::move(lane));
  UpstreamResult out;
  out.seconds = response.seconds;
  switch (response.outcome) {
    case llm::HttpOutcome::kOk:
      break;
    case llm::HttpOutcome::kTimeout:
      out.status = 504;
      out.code = "upstream_timeout";
      out.error = "the LLM server did not answer within " + std::to_string(options_.request_timeout_s) +
                  " s: " + response.error;
      out.retry_after = 1;
      return out;
    case llm::HttpOutcome::kHttpError: {
      const bool retry = response.status >= 500 || response.status == 429;
      out.status = retry ? (response.status == 429 ? 429 : 502) : 502;
      out.code = response.status == 429 ? "upstream_rate_limited" : "upstream_error";
      out.error = "the LLM server answered HTTP " + std::to_string(response.status) + ": " +
                  response.body.substr(0, 300);
      out.retry_after = retry ? 1 : 0;
      return out;
    }
    case llm::HttpOutcome::kConnectionError:
    case llm::HttpOutcome::kCancelled:
      out.status = 503;
      out.code = "upstream_unavailable";
      out.error = "the LLM server could not be reached: " + response.error;
      out.retry_after = 1;
      return out;
  }
  if (stream && stream->active) {
    if (stream->failure.empty() && !stream->answer.finished())
      stream->failure = "the stream ended before the event that finishes the answer";
    if (stream->failure.empty()) {
      out.answer = stream->answer.take();
    } else {
      out.answer.ok = false;
      out.answer.error = stream->failure;
    }
  } else {
    out.answer = llm::parse_response(options_.api, response.body, options_.vocab_size,
                                     call.sampling.top_logprobs, {call.prompt, call.prompt_ids_json});
  }
  if (!out.answer.ok) {
    out.status = 502;
    out.code = "upstream_malformed";
    out.error = "the LLM server's answer is malformed: " + out.answer.error;
    return out;
  }
  if (static_cast<int64_t>(out.answer.ids.size()) > call.max_new_tokens) {
    out.status = 502;
    out.code = "upstream_malformed";
    out.error = "the LLM server answered " + std::to_string(out.answer.ids.size()) +
                " tokens but max_new_tokens was " + std::to_string(call.max_new_tokens);
    return out;
  }
  out.ok = true;
  return out;
}

}  // namespace crl::server::gateway
