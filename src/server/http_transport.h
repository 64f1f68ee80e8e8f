// The HTTP transport under cpp-httplib's request processing. httplib 0.11 gives every connection
// a worker thread for its whole life, so a few hundred idle or slowly-sent connections starve the
// pool, /health included. Here one epoll thread (the reactor) owns every connection that is not
// being answered: it reads request headers without blocking, under a deadline, and hands a
// connection to a worker only when a whole header block has arrived. Probes (/health, /ready,
// /metrics) have their own two workers, so they answer while every API worker is busy. The
// number of open connections is capped (more are answered 503 at once), and a connection idle
// between requests costs no thread.
//
// httplib still parses the request, routes it and writes the response: HttpTransport overrides
// its per-connection entry (process_and_close_socket, called on the accept thread through an
// inline task queue) and calls its protected process_request with a Stream over the buffered
// connection.
#pragma once

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

namespace gb::server {

struct TransportLimits {
  size_t max_connections = 1024;                    // open connections; more are answered 503 and closed at once
  size_t workers = 16;                              // threads answering API requests
  size_t probe_workers = 2;                         // threads answering /health, /ready and /metrics only
  size_t max_pending = 256;                         // complete requests waiting for a worker, per lane; more: 503
  size_t max_header_bytes = 32 << 10;               // request line + headers; more: 431
  size_t max_body_bytes = 4 << 20;                  // the transport refuses to read more than this + 1 MiB per request
  std::chrono::milliseconds header_timeout{10000};  // the whole header block, from when the wait began
  std::chrono::milliseconds body_timeout{60000};    // the whole body
  std::chrono::milliseconds read_timeout{30000};    // one read during the body
  std::chrono::milliseconds write_timeout{30000};   // one write
  // A connection idle between requests is closed after keep_alive_timeout, but its responses
  // advertise only keep_alive_advertised (`Keep-Alive: timeout=5`), so clients (which close an
  // idle socket a second before the hint) always close first. A server that closes first races
  // the client's next request on that socket, which then fails with a reset (it did under load:
  // Node's fetch closes at hint − 1 s, and a starved event loop is late). An idle connection
  // costs no thread here, and max_connections bounds them.
  std::chrono::milliseconds keep_alive_timeout{60000};
  std::chrono::seconds keep_alive_advertised{5};
  size_t keep_alive_max_count = 100;  // requests per connection (advertised as max=)
  int listen_backlog = SOMAXCONN;     // the kernel's accept queue (capped by net.core.somaxconn)
};

struct TransportStats {
  int64_t open = 0;             // connections now
  int64_t accepted = 0;         // since start
  int64_t refused_full = 0;     // answered 503: max_connections reached
  int64_t refused_busy = 0;     // answered 503: the lane's pending queue was full
  int64_t header_timeouts = 0;  // closed (408) for headers that did not arrive in time
};

// The connection a handler runs on (thread-local while httplib processes its request).
struct ConnectionContext {
  int fd = -1;
  bool close_after = false;  // set by a handler that left the body unread: close after the answer
};
// Null outside a request handled by HttpTransport.
ConnectionContext* current_connection();

class HttpTransport : public httplib::Server {
 public:
  explicit HttpTransport(TransportLimits limits);
  ~HttpTransport() override;

  // Binds host:port (0: any free port) with the configured accept backlog; the bound port, or -1.
  // httplib listens with a backlog of 5: a burst of connections overflowed it, and the kernel reset
  // the ones whose SYN cookie then failed (6 of 64 concurrent 300 KB POSTs).
  int bind_listener(const std::string& host, int port);
  // Starts the reactor and the workers; call before listen_after_bind().
  void start_transport();
  // After stop() and the listen thread have returned: closes idle connections, lets the workers
  // finish the requests they hold, and joins every thread. Idempotent.
  void stop_transport();

  TransportStats stats() const;
  const TransportLimits& limits() const { return limits_; }

 private:
  struct Conn;
  struct Lane {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Conn*> queue;
    std::vector<std::thread> threads;
    bool stop = false;
  };
  class ConnStream;

  // httplib's per-connection entry, on the accept thread: adopt the socket, never block.
  bool process_and_close_socket(socket_t sock) override;
  void reactor_loop();
  void on_readable(Conn* c);
  void sweep_deadlines();
  // Reactor-owned from here: armed for one readiness event.
  void watch(Conn* c);
  void dispatch(Conn* c);
  void serve(Conn* c);
  void worker_loop(Lane* lane);
  // Writes a small error response (best effort, non-blocking) and closes.
  void refuse(Conn* c, int status, const char* code, const std::string& message);
  // Half-closes and discards what the client still sends for a moment, so the answer is not lost
  // to a reset; then closes.
  void linger_close(Conn* c);
  void close_conn(Conn* c);

  TransportLimits limits_;
  int listen_fd_ = -1;  // the last socket httplib created to bind (set in the socket-options hook)
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread reactor_;
  std::atomic<bool> stopping_{false};
  bool started_ = false;
  mutable std::mutex idle_mutex_;
  std::unordered_set<Conn*> idle_;  // reactor-owned connections (waiting for headers, keep-alive, linger)
  Lane api_, probes_;
  std::atomic<int64_t> open_{0}, accepted_{0}, refused_full_{0}, refused_busy_{0}, header_timeouts_{0};
};

}  // namespace gb::server
