#pragma once
// An in-process `crl serve` on an ephemeral loopback port for the server's tests: the step service and the
// HTTP transport, run on a thread of their own and stopped (drained) when the object goes away.
#include <cstdint>
#include <thread>

#include "server/episode_service.h"
#include "server/http_server.h"
#include "server/thread_name.h"

namespace crl::server::testing {

struct TestServer {
  explicit TestServer(HttpOptions http = {}, ServiceOptions service_options = {})
      : service(service_options), server(with_port0(http), service), thread([this] {
          name_this_thread("crl-io");  // (the thread that runs the server is its first I/O thread)
          server.run();
        }) {}
  ~TestServer() {
    server.request_stop();
    thread.join();
  }
  // Port 0 (the kernel picks a free one) and no signal handlers: tests run servers side by side.
  static HttpOptions with_port0(HttpOptions o) {
    o.port = 0;
    o.handle_signals = false;
    return o;
  }
  uint16_t port() const { return server.port(); }

  EpisodeService service;
  HttpServer server;
  std::thread thread;
};

}  // namespace crl::server::testing
