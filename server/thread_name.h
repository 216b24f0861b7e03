#pragma once
// Names the calling thread: what `top -H`, `perf` and /proc/PID/task/TID/comm show. The HTTP server's extra
// I/O threads are crl-io and its worker pool's threads crl-worker, so an operator can tell where a busy
// server spends its CPU (bench/gateway_bench.cpp sums the server's CPU per call by these names). The thread
// that calls HttpServer::run keeps its name (crl serve's main thread: renaming it renames the process for
// `top` and `killall`). Linux keeps 15 bytes of a name; elsewhere this does nothing.
#if defined(__linux__)
#include <pthread.h>
#endif

namespace crl::server {

inline void name_this_thread(const char* name) {
#if defined(__linux__)
  pthread_setname_np(pthread_self(), name);
#else
  (void)name;
#endif
}

}  // namespace crl::server
