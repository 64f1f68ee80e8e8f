#include "server/http_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace gb::server {

namespace {

using Clock = std::chrono::steady_clock;

thread_local ConnectionContext* tl_connection = nullptr;

constexpr size_t kReadChunk = 16 << 10;
constexpr size_t kLingerMaxBytes = 1 << 20;
constexpr auto kLingerTime = std::chrono::milliseconds(1000);

void endpoint_of(const sockaddr_storage& ss, std::string* ip, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    *port = ntohs(a->sin6_port);
  }
  *ip = buf;
}

int remaining_ms(Clock::time_point until) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

bool is_probe(std::string_view request_line) {
  for (const char* p :
       {"GET /health ", "GET /health?", "GET /ready ", "GET /ready?", "GET /metrics ", "GET /metrics?"}) {
    if (request_line.rfind(p, 0) == 0) return true;
  }
  return false;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

}  // namespace

ConnectionContext* current_connection() { return tl_connection; }

struct HttpTransport::Conn {
  int fd = -1;
  std::string buf;  // bytes read and not yet consumed start at pos
  size_t pos = 0;
  size_t header_end = 0;  // buf offset just past the current request's blank line (0: not complete)
  size_t scanned = 0;     // buf offset up to which the header search has looked
  Clock::time_point deadline;
  bool waiting_first_byte = true;  // keep-alive idle (no timeout answer) vs a request under way
  bool lingering = false;
  size_t lingered = 0;
  size_t served = 0;
  std::string remote_ip, local_ip;
  int remote_port = 0, local_port = 0;

  // Looks for the end of the header block from where the last search stopped.
  bool find_header_end() {
    const size_t from = std::max(pos, scanned >= 3 ? scanned - 3 : 0);
    const size_t at = buf.find("\r\n\r\n", from);
    scanned = buf.size();
    if (at == std::string::npos) return false;
    header_end = at + 4;
    return true;
  }
  void compact() {
    if (pos == 0) return;
    buf.erase(0, pos);
    header_end = header_end > pos ? header_end - pos : 0;
    scanned = scanned > pos ? scanned - pos : 0;
    pos = 0;
  }
};

// httplib's view of a connection: reads come out of the connection's buffer first (the headers
// the reactor already read), then from the socket into that buffer, under the read and body
// deadlines and the body budget; writes go straight to the socket under the write timeout.
class HttpTransport::ConnStream : public httplib::Stream {
 public:
  ConnStream(Conn* c, const TransportLimits& limits)
      : c_(c),
        limits_(limits),
        body_deadline_(Clock::now() + limits.body_timeout),
        budget_(limits.max_body_bytes + (1u << 20)) {}

  bool is_readable() const override {
    if (c_->pos < c_->buf.size()) return true;
    pollfd p{c_->fd, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(limits_.read_timeout.count())) > 0;
  }
  bool is_writable() const override {
    pollfd p{c_->fd, POLLOUT, 0};
    return ::poll(&p, 1, static_cast<int>(limits_.write_timeout.count())) > 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (c_->pos >= c_->buf.size()) {
      c_->compact();
      if (!fill()) return eof_ ? 0 : -1;
    }
    const size_t n = std::min(size, c_->buf.size() - c_->pos);
    std::memcpy(ptr, c_->buf.data() + c_->pos, n);
    c_->pos += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    size_t off = 0;
    while (off < size) {
      const ssize_t n = ::send(c_->fd, ptr + off, size - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{c_->fd, POLLOUT, 0};
        if (::poll(&p, 1, static_cast<int>(limits_.write_timeout.count())) > 0) continue;
      }
      return -1;
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = c_->remote_ip;
    port = c_->remote_port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = c_->local_ip;
    port = c_->local_port;
  }
  socket_t socket() const override { return c_->fd; }

 private:
  // Reads what the socket has (waiting up to the read timeout) into the buffer; false on EOF, an
  // error, a deadline or the budget.
  bool fill() {
    for (;;) {
      if (read_so_far_ > budget_) return false;
      if (Clock::now() >= body_deadline_) return false;
      const int wait = std::min(static_cast<int>(limits_.read_timeout.count()), remaining_ms(body_deadline_));
      pollfd p{c_->fd, POLLIN, 0};
      const int r = ::poll(&p, 1, wait);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      const size_t old = c_->buf.size();
      c_->buf.resize(old + kReadChunk);
      const ssize_t n = ::recv(c_->fd, c_->buf.data() + old, kReadChunk, 0);
      c_->buf.resize(old + (n > 0 ? static_cast<size_t>(n) : 0));
      if (n > 0) {
        read_so_far_ += static_cast<size_t>(n);
        return true;
      }
      if (n == 0) {
        eof_ = true;
        return false;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    }
  }

  Conn* c_;
  const TransportLimits& limits_;
  Clock::time_point body_deadline_;
  size_t budget_;
  size_t read_so_far_ = 0;
  bool eof_ = false;
};

namespace {

// Runs httplib's per-connection task inline on the accept thread (it only adopts the socket).
class InlineQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

}  // namespace

HttpTransport::HttpTransport(TransportLimits limits) : limits_(limits) {
  new_task_queue = [] { return new InlineQueue; };
  // What the Keep-Alive header says (httplib writes it from these; the reactor enforces limits_).
  set_keep_alive_timeout(static_cast<time_t>(limits_.keep_alive_advertised.count()));
  set_keep_alive_max_count(limits_.keep_alive_max_count);
  // SO_REUSEADDR only (httplib's default adds SO_REUSEPORT, which lets a second server bind the
  // same port and silently share its connections).
  set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd_ = sock;
  });
}

int HttpTransport::bind_listener(const std::string& host, int port) {
  listen_fd_ = -1;
  int bound = port;
  if (port == 0) {
    bound = bind_to_any_port(host);
  } else if (!bind_to_port(host, port)) {
    bound = -1;
  }
  if (bound <= 0) return -1;
  // listen() again on a listening socket only resizes its accept queue.
  if (listen_fd_ < 0 || ::listen(listen_fd_, limits_.listen_backlog) != 0) return -1;
  return bound;
}

HttpTransport::~HttpTransport() { stop_transport(); }

void HttpTransport::start_transport() {
  if (started_) return;
  started_ = true;
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the wake-up
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  reactor_ = std::thread([this] { reactor_loop(); });
  for (size_t i = 0; i < std::max<size_t>(1, limits_.workers); ++i)
    api_.threads.emplace_back([this] { worker_loop(&api_); });
  for (size_t i = 0; i < std::max<size_t>(1, limits_.probe_workers); ++i)
    probes_.threads.emplace_back([this] { worker_loop(&probes_); });
}

void HttpTransport::stop_transport() {
  if (!started_) return;
  started_ = false;
  {
    std::lock_guard<std::mutex> lock(idle_mutex_);
    stopping_.store(true);
  }
  uint64_t one = 1;
  [[maybe_unused]] ssize_t w = ::write(wake_fd_, &one, sizeof one);
  if (reactor_.joinable()) reactor_.join();
  for (Lane* lane : {&api_, &probes_}) {
    {
      std::lock_guard<std::mutex> lock(lane->mutex);
      lane->stop = true;
    }
    lane->cv.notify_all();
    for (std::thread& t : lane->threads) t.join();
    lane->threads.clear();
    for (Conn* c : lane->queue) close_conn(c);
    lane->queue.clear();
  }
  std::vector<Conn*> idle;
  {
    std::lock_guard<std::mutex> lock(idle_mutex_);
    idle.assign(idle_.begin(), idle_.end());
    idle_.clear();
  }
  for (Conn* c : idle) close_conn(c);
  ::close(epoll_fd_);
  ::close(wake_fd_);
}

TransportStats HttpTransport::stats() const {
  TransportStats s;
  s.open = open_.load();
  s.accepted = accepted_.load();
  s.refused_full = refused_full_.load();
  s.refused_busy = refused_busy_.load();
  s.header_timeouts = header_timeouts_.load();
  return s;
}

bool HttpTransport::process_and_close_socket(socket_t sock) {
  auto* c = new Conn;
  c->fd = sock;
  fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(sock, reinterpret_cast<sockaddr*>(&ss), &len) == 0) endpoint_of(ss, &c->remote_ip, &c->remote_port);
  len = sizeof ss;
  if (getsockname(sock, reinterpret_cast<sockaddr*>(&ss), &len) == 0) endpoint_of(ss, &c->local_ip, &c->local_port);
  accepted_.fetch_add(1);
  if (open_.fetch_add(1) >= static_cast<int64_t>(limits_.max_connections) || stopping_.load()) {
    refused_full_.fetch_add(1);
    refuse(c, 503, "too_many_connections",
           "the server has its maximum of " + std::to_string(limits_.max_connections) +
               " open connections (max_connections); retry shortly");
    return true;
  }
  c->waiting_first_byte = false;  // a new connection is expected to send a request now
  c->deadline = Clock::now() + limits_.header_timeout;
  watch(c);
  return true;
}

void HttpTransport::watch(Conn* c) {
  {
    std::lock_guard<std::mutex> lock(idle_mutex_);
    if (!stopping_.load()) {
      idle_.insert(c);
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
      ev.data.ptr = c;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c->fd, &ev) != 0) epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->fd, &ev);
      return;
    }
  }
  close_conn(c);  // stop_transport has collected the idle set already
}

void HttpTransport::reactor_loop() {
  std::vector<epoll_event> events(256);
  Clock::time_point next_sweep = Clock::now();
  while (!stopping_.load()) {
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), 50);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_, &v, sizeof v);
        continue;
      }
      on_readable(static_cast<Conn*>(events[i].data.ptr));
    }
    if (Clock::now() >= next_sweep) {
      sweep_deadlines();
      next_sweep = Clock::now() + std::chrono::milliseconds(50);
    }
  }
}

void HttpTransport::on_readable(Conn* c) {
  if (c->lingering) {
    char sink[16 << 10];
    for (;;) {
      const ssize_t n = ::recv(c->fd, sink, sizeof sink, 0);
      if (n > 0) {
        c->lingered += static_cast<size_t>(n);
        if (c->lingered > kLingerMaxBytes) break;
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return watch(c);
      if (n < 0 && errno == EINTR) continue;
      break;  // EOF, an error, or enough
    }
    {
      std::lock_guard<std::mutex> lock(idle_mutex_);
      idle_.erase(c);
    }
    return close_conn(c);
  }
  for (;;) {
    const size_t old = c->buf.size();
    c->buf.resize(old + kReadChunk);
    const ssize_t n = ::recv(c->fd, c->buf.data() + old, kReadChunk, 0);
    c->buf.resize(old + (n > 0 ? static_cast<size_t>(n) : 0));
    if (n > 0) {
      c->waiting_first_byte = false;
      if (c->find_header_end()) {
        {
          std::lock_guard<std::mutex> lock(idle_mutex_);
          idle_.erase(c);
        }
        return dispatch(c);
      }
      if (c->buf.size() - c->pos > limits_.max_header_bytes) {
        {
          std::lock_guard<std::mutex> lock(idle_mutex_);
          idle_.erase(c);
        }
        return refuse(
            c, 431, "request_header_fields_too_large",
            "the request line and headers are larger than " + std::to_string(limits_.max_header_bytes) + " bytes");
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return watch(c);
    // The client closed (or reset) before sending a whole request.
    {
      std::lock_guard<std::mutex> lock(idle_mutex_);
      idle_.erase(c);
    }
    return close_conn(c);
  }
}

void HttpTransport::sweep_deadlines() {
  const Clock::time_point now = Clock::now();
  std::vector<Conn*> expired;
  {
    std::lock_guard<std::mutex> lock(idle_mutex_);
    for (auto it = idle_.begin(); it != idle_.end();) {
      if ((*it)->deadline <= now) {
        expired.push_back(*it);
        it = idle_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Conn* c : expired) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
    if (c->lingering || c->waiting_first_byte) {
      close_conn(c);  // an idle keep-alive connection, or a linger that ran out
    } else {
      header_timeouts_.fetch_add(1);
      refuse(c, 408, "request_timeout",
             "the request headers did not arrive within " + std::to_string(limits_.header_timeout.count()) + " ms");
    }
  }
}

void HttpTransport::dispatch(Conn* c) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  const std::string_view head(c->buf.data() + c->pos, c->header_end - c->pos);
  Lane* lane = is_probe(head) ? &probes_ : &api_;
  {
    std::lock_guard<std::mutex> lock(lane->mutex);
    if (!lane->stop && lane->queue.size() < limits_.max_pending) {
      lane->queue.push_back(c);
      lane->cv.notify_one();
      return;
    }
  }
  refused_busy_.fetch_add(1);
  refuse(c, 503, "server_busy", "every HTTP worker is busy and the request queue is full; retry shortly");
}

void HttpTransport::worker_loop(Lane* lane) {
  for (;;) {
    Conn* c = nullptr;
    {
      std::unique_lock<std::mutex> lock(lane->mutex);
      lane->cv.wait(lock, [&] { return lane->stop || !lane->queue.empty(); });
      if (lane->stop || lane->queue.empty()) return;
      c = lane->queue.front();
      lane->queue.pop_front();
    }
    serve(c);
  }
}

void HttpTransport::serve(Conn* c) {
  ConnectionContext ctx;
  ctx.fd = c->fd;
  tl_connection = &ctx;
  ConnStream strm(c, limits_);
  const bool close_connection = ++c->served >= limits_.keep_alive_max_count || stopping_.load();
  bool connection_closed = false;
  bool ok = false;
  try {
    ok = process_request(strm, close_connection, connection_closed, nullptr);
  } catch (...) {
    ok = false;
  }
  tl_connection = nullptr;
  // A request refused before its body was read (ctx.close_after) leaves the connection out of
  // step: answer, then linger and close.
  if (ctx.close_after) return linger_close(c);
  if (!ok || connection_closed || close_connection || stopping_.load()) return close_conn(c);
  c->compact();
  c->header_end = 0;
  c->scanned = 0;
  c->waiting_first_byte = c->buf.empty();
  if (c->find_header_end()) return dispatch(c);  // a pipelined request is already here
  c->deadline = Clock::now() + (c->waiting_first_byte ? limits_.keep_alive_timeout : limits_.header_timeout);
  watch(c);
}

void HttpTransport::refuse(Conn* c, int status, const char* code, const std::string& message) {
  const std::string body = nlohmann::json{
      {"error",
       {{"message", message},
        {"type", status == 503 ? "service_unavailable" : "invalid_request_error"},
        {"param", nullptr},
        {"code", code}}}}.dump();
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
                    "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\nConnection: close\r\n";
  if (status == 503) out += "Retry-After: 1\r\n";
  out += "\r\n" + body;
  [[maybe_unused]] ssize_t n = ::send(c->fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  linger_close(c);
}

void HttpTransport::linger_close(Conn* c) {
  if (stopping_.load()) return close_conn(c);
  ::shutdown(c->fd, SHUT_WR);
  c->lingering = true;
  c->buf.clear();
  c->buf.shrink_to_fit();
  c->pos = c->header_end = c->scanned = 0;
  c->deadline = Clock::now() + kLingerTime;
  watch(c);
}

void HttpTransport::close_conn(Conn* c) {
  ::close(c->fd);
  open_.fetch_sub(1);
  delete c;
}

}  // namespace gb::server
